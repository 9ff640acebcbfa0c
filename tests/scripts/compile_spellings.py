"""Every way CUDA scripts spell torch.compile, on a small model, each compared with eager; gpt-fast's inductor
settings and TF32 switched on first, as those scripts do. A function with a graph break (a .item() read) too.

Prints one JSON line: {"<spelling>": <max abs difference from eager>, ...}.
"""
import json

import torch
import torch._dynamo
import torch._inductor.config
import torch.nn as nn

torch._inductor.config.coordinate_descent_tuning = True
torch._inductor.config.triton.unique_kernel_names = True
torch._inductor.config.fx_graph_cache = True
torch.backends.cuda.matmul.allow_tf32 = True
torch.set_float32_matmul_precision("high")

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).cuda()
x = torch.randn(6, 8, device="cuda")


def loss_of(m, inp):
    return m(inp).pow(2).mean()


def with_break(inp):
    scale = inp.abs().max().item()  # a graph break: dynamo cannot keep a Python float in the graph
    return model(inp) / scale


@torch.compile
def decorated(inp):
    return model(inp).tanh()


compiled = {
    "default": torch.compile(model),
    "max-autotune": torch.compile(model, mode="max-autotune"),
    "dynamic": torch.compile(model, dynamic=True),
    "inductor-spelled-out": torch.compile(model, backend="inductor", fullgraph=True),
    "dynamo.optimize": torch._dynamo.optimize("inductor")(model),
}
eager = model(x)
result = {name: (fn(x) - eager).abs().max().item() for name, fn in compiled.items()}
result["decorator"] = (decorated(x) - model(x).tanh()).abs().max().item()
result["graph-break"] = (torch.compile(with_break)(x) - with_break(x)).abs().max().item()
print(json.dumps(result))

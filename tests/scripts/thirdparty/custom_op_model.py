"""A model whose activation is a custom operator registered for CUDA with torch.library (the pattern of
repositories that ship a Python/Triton-free fallback kernel for their fused op).

Usage: python custom_op_model.py
"""
import hashlib

import torch
import torch.nn as nn

lib = torch.library.Library("fusedact", "DEF")
lib.define("bias_gelu(Tensor x, Tensor bias) -> Tensor")
lib.define("bias_gelu_backward(Tensor grad, Tensor x, Tensor bias) -> Tensor")


def bias_gelu_cuda(x, bias):
    y = x + bias
    return y * 0.5 * (1.0 + torch.erf(y * 0.7071067811865476))


def bias_gelu_backward_cuda(grad, x, bias):
    y = x + bias
    cdf = 0.5 * (1.0 + torch.erf(y * 0.7071067811865476))
    pdf = torch.exp(-0.5 * y * y) * 0.3989422804014327
    return grad * (cdf + y * pdf)


lib.impl("bias_gelu", bias_gelu_cuda, "CUDA")
lib.impl("bias_gelu_backward", bias_gelu_backward_cuda, "CUDA")


class BiasGelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):
        ctx.save_for_backward(x, bias)
        return torch.ops.fusedact.bias_gelu(x, bias)

    @staticmethod
    def backward(ctx, grad):
        x, bias = ctx.saved_tensors
        dx = torch.ops.fusedact.bias_gelu_backward(grad, x, bias)
        return dx, dx.sum(0)


@torch.library.custom_op("fusedact::scaled_tanh", mutates_args=(), device_types="cuda")
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


@scaled_tanh.register_fake
def _(x, scale):
    return torch.empty_like(x)


def _scaled_tanh_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * ctx.scale * (1 - torch.tanh(x) ** 2), None


def _scaled_tanh_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.scale = inputs[1]


scaled_tanh.register_autograd(_scaled_tanh_backward, setup_context=_scaled_tanh_setup)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64, bias=False)
        self.bias = nn.Parameter(torch.zeros(64))
        self.fc2 = nn.Linear(64, 2)

    def forward(self, x):
        return self.fc2(scaled_tanh(BiasGelu.apply(self.fc1(x), self.bias), 2.0))


def main():
    torch.manual_seed(0)
    model = Net().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 20, generator=g)
    y = (x[:, 0] * x[:, 1] > 0).long()
    x, y = x.cuda(), y.cuda()
    losses = []
    for _ in range(60):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    accuracy = (model(x).argmax(1) == y).float().mean().item()
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(repr(t.detach().cpu().flatten().tolist()).encode())
    print(f"rank 0: loss {losses[0]:.4f} -> {losses[-1]:.4f}, accuracy {accuracy:.3f}")
    print(f"rank 0: parameters {h.hexdigest()[:16]} on {next(model.parameters()).device}")
    print("rank 0: done")


if __name__ == "__main__":
    main()

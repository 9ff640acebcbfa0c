"""A float64 model under DDP, a float64 metric reduced through the functional collectives (DTensor's path), and
sums pre-multiplied by a factor (ReduceOp.PREMUL_SUM, as FSDP2 divides gradients on NCCL) in float32 and float64,
and a float64 all_reduce inside torch's _coalescing_manager (its error recorded, if any).

Launch: torchrun --nproc_per_node=2 ddp_float64.py OUT_DIR
Each rank writes OUT_DIR/rank<R>.json: its inputs, DDP's averaged gradients and the functional all_reduce's
result (floats as float.hex, so comparisons are exact), and prints "rank R: done".
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def hexes(t):
    return [float(v).hex() for v in t.detach().cpu().flatten().tolist()]


def main(out):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device = torch.device("cuda", local_rank)

    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 1, dtype=torch.float64, device=device), device_ids=[local_rank])
    x = torch.arange(8, dtype=torch.float64, device=device).view(2, 4) / 3 + rank
    model(x).sum().backward()

    metric = torch.tensor([1.0 / 3 + rank, 0.1 * (rank + 1)], dtype=torch.float64, device=device)
    total = funcol.all_reduce(metric, "sum", dist.group.WORLD)
    scaled = torch.tensor([1.0 + rank, 3.0], device=device)
    dist.all_reduce(scaled, op=dist._make_nccl_premul_sum(0.25))
    scaled64 = torch.tensor([1.0 / 3 + rank], dtype=torch.float64, device=device)
    dist.all_reduce(scaled64, op=dist._make_nccl_premul_sum(0.5))
    coalesced = torch.tensor([1.0 / 3 + rank], dtype=torch.float64, device=device)
    try:  # a float64 all_reduce batched with torch's coalescing manager (what FSDP1 and DDP's internals use)
        with dist._coalescing_manager():
            dist.all_reduce(coalesced)
        refused = None
    except Exception as exc:  # recorded for the test to compare with what CUDA does
        refused = {"type": type(exc).__name__, "message": str(exc)}
    result = {"dtype": str(model.module.weight.dtype), "device": str(model.module.weight.device),
              "weight": hexes(model.module.weight), "bias": hexes(model.module.bias),
              "grad_weight": hexes(model.module.weight.grad), "grad_bias": hexes(model.module.bias.grad),
              "metric": hexes(metric), "total": hexes(total),
              "premul": hexes(scaled), "premul64": hexes(scaled64), "coalesced": refused}
    dist.destroy_process_group()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump(result, fh)
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

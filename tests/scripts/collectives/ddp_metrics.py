"""DDP training, then the metrics a CUDA script reduces across its ranks, and two calls NCCL refuses.

Metrics: a float64 loss sum and its maximum, an int64 count, float64 and int64 averages, uint8 and bool
flags, a complex128 sum, a float64 reduce to rank 0, float64 and uint8 reduce_scatter_tensor, float64
predictions gathered onto rank 0 (dist.gather) and objects (dist.gather_object). Refused by NCCL: a
ReduceOp.BAND all_reduce and a recv without a source (each recorded with its error, or its result where
the backend computes it).

Launch: torchrun --nproc_per_node=2 ddp_metrics.py OUT_DIR
Each rank writes OUT_DIR/rank<R>.json (floats as float.hex, so comparisons are exact) and prints
"rank R: done".
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def values(t):
    t = t.detach().cpu()
    if t.is_complex():
        return [[float(z.real).hex(), float(z.imag).hex()] for z in t.flatten().tolist()]
    if t.is_floating_point():
        return [float(v).hex() for v in t.flatten().tolist()]
    return t.flatten().tolist()


def attempt(call):
    try:
        call()
        return None
    except Exception as exc:  # what the backend says, for the test to compare with NCCL's
        return {"type": type(exc).__name__, "message": str(exc)}


def main(out):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank)
    result = {"rank": rank, "world": world, "backend": str(dist.get_backend())}

    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).to(device), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, 8, generator=g)
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    xs, ys = x[rank::world].to(device), y[rank::world].to(device)
    losses = []
    for _ in range(60):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(xs), ys)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    result["losses"] = [losses[0], losses[-1]]
    result["parameters_on"] = str(next(model.parameters()).device)

    with torch.no_grad():
        per_sample = ((model(xs) - ys) ** 2).squeeze(1)
    inputs = {"loss_sum": torch.tensor([per_sample.sum().item()], dtype=torch.float64, device=device),
              "max_error": torch.tensor([per_sample.max().item()], dtype=torch.float64, device=device)}
    result["inputs"] = {k: values(v) for k, v in inputs.items()}

    loss_sum = inputs["loss_sum"].clone()
    dist.all_reduce(loss_sum)  # float64 SUM
    max_error = inputs["max_error"].clone()
    dist.all_reduce(max_error, op=dist.ReduceOp.MAX)
    count = torch.tensor([per_sample.numel()], device=device)
    dist.all_reduce(count)  # int64
    avg64 = torch.tensor([rank + 0.1, 3.0 / (rank + 1)], dtype=torch.float64, device=device)
    dist.all_reduce(avg64, op=dist.ReduceOp.AVG)
    int_avg = torch.tensor([7 + 2 * rank, -7 - rank], device=device)
    dist.all_reduce(int_avg, op=dist.ReduceOp.AVG)
    any_flag = torch.tensor([rank == 0, True, False], device=device)
    dist.all_reduce(any_flag)  # bool SUM: a logical or
    all_flag = torch.tensor([rank == 0, True, False], device=device)
    dist.all_reduce(all_flag, op=dist.ReduceOp.MIN)  # a logical and
    bytes_ = torch.tensor([200, 1 + rank], dtype=torch.uint8, device=device)
    dist.all_reduce(bytes_)  # wraps modulo 256
    z = torch.tensor([complex(0.1, rank), complex(rank, 1.0 / 3)], dtype=torch.complex128, device=device)
    dist.all_reduce(z)
    reduced = torch.tensor([1.0 / 3 + rank], dtype=torch.float64, device=device)
    dist.reduce(reduced, dst=0)
    rs64 = torch.empty(2, dtype=torch.float64, device=device)
    dist.reduce_scatter_tensor(rs64, torch.arange(4, dtype=torch.float64, device=device) / 3 + rank)
    rs8 = torch.empty(2, dtype=torch.uint8, device=device)
    dist.reduce_scatter_tensor(rs8, torch.tensor([250, 1, 2, 3], dtype=torch.uint8, device=device) + rank)
    predictions = torch.arange(3, dtype=torch.float64, device=device) / 7 + rank
    gathered = [torch.empty(3, dtype=torch.float64, device=device) for _ in range(world)] if rank == 0 else None
    dist.gather(predictions, gathered, dst=0)
    objects = [None] * world if rank == 0 else None
    dist.gather_object({"rank": rank, "loss": losses[-1]}, objects, dst=0)
    result["outputs"] = {
        "loss_sum": values(loss_sum), "max_error": values(max_error), "count": values(count),
        "avg64": values(avg64), "int_avg": values(int_avg), "any_flag": values(any_flag),
        "all_flag": values(all_flag), "bytes": values(bytes_), "complex": values(z), "reduced": values(reduced),
        "rs64": values(rs64), "rs8": values(rs8),
        "gathered": [values(t) for t in gathered] if gathered else None,
        "objects": objects,
    }

    bits = torch.tensor([0b1100 | rank], dtype=torch.int32, device=device)
    result["band"] = attempt(lambda: dist.all_reduce(bits, op=dist.ReduceOp.BAND))
    result["band_value"] = values(bits)

    # rank 0 receives without naming the sender; rank 1 sends. Where the backend refuses, rank 0 then
    # receives from rank 1 by name, so the send completes either way.
    message = torch.full((2,), 5.0 + rank, device=device)
    if rank == 1:
        work = dist.isend(message, 0)
    refused = attempt(lambda: dist.recv(message)) if rank == 0 else None
    verdict = [refused]
    dist.broadcast_object_list(verdict, src=0)
    if rank == 0 and verdict[0] is not None:
        dist.recv(message, src=1)
    if rank == 1:
        work.wait()
    result["recv_any"] = verdict[0]
    result["received"] = values(message)

    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump(result, fh)
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

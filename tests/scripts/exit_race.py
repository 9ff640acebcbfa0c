"""Scripts that end right after a backward pass with collectives over gloo (2 ranks, env://).

Run as two processes with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, like torchrun's workers.

``ddp``: CUDA-style DDP training that ends right after the last backward (no optimizer step, no
destroy_process_group): the shape of script that stock torch 2.13 aborts at exit now and then with
"terminate called without an active exception".

``hook``: the same race made deterministic. A gradient hook launches an all_reduce during
backward (as DDP's reducer does from its hooks), so the gloo work captures the Context that
torch.autograd.graph._engine_run_backward stashes in the thread-local state. Rank 1 joins that
all_reduce one second late, while rank 0 keeps the GIL (a large switch interval, busy Python) until
its script ends: rank 0's gloo worker completes the work and must take the GIL to drop the
Context, which it only gets in a finalizing interpreter. Without a fix rank 0 aborts every time.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

mode = sys.argv[1]
rank = int(os.environ["RANK"])

if mode == "ddp":
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)]).cuda()
    model = DDP(model, device_ids=[local_rank], bucket_cap_mb=0.01)  # several buckets: several works
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 64).cuda()).sum().backward()
        optimizer.step()
    model(torch.randn(4, 64).cuda()).sum().backward()
    print(f"rank {rank} done", flush=True)
elif mode == "hook":
    dist.init_process_group("gloo")
    if rank == 1:
        time.sleep(1.0)
        dist.all_reduce(torch.ones(1000))
        time.sleep(4.0)
    else:
        weight = torch.ones(4, requires_grad=True)

        def launch_all_reduce(grad):
            dist.all_reduce(torch.ones(1000), async_op=True)  # fire and forget, inside backward
            return grad

        weight.register_hook(launch_all_reduce)
        sys.setswitchinterval(100)  # this thread keeps the GIL unless it blocks
        (weight * 2).sum().backward()
        print(f"rank {rank} done", flush=True)  # (writing releases the GIL: before the busy wait)
        end = time.monotonic() + 2.5  # busy while rank 1 joins and the work completes
        while time.monotonic() < end:
            pass
    if rank == 1:
        print(f"rank {rank} done", flush=True)
else:
    raise SystemExit(f"unknown mode {mode}")

"""A CUDA DDP script (one rank, so its backward runs collectives over the backend) that ends with
something still holding a Python context. Prints "end of script <time.time()>" as its last act.

``pending``: an asyncio task left pending (an event loop the script never closed); its context copy
is not a backward's.
``held``: a gradient hook keeps a copy of the backward's context forever (as a collective whose peer
died keeps its work).

Usage: exit_pending_task.py MODE PORT
"""
import asyncio
import contextvars
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

mode, port = sys.argv[1], sys.argv[2]
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[0])
kept = []
if mode == "held":
    model.module.weight.register_hook(lambda grad: kept.append(contextvars.copy_context()))
model(torch.randn(2, 4).cuda()).sum().backward()


async def forever():
    await asyncio.sleep(3600)


if mode == "pending":
    loop = asyncio.new_event_loop()
    task = loop.create_task(forever())
    loop.run_until_complete(asyncio.sleep(0))
print(f"end of script {time.time()}", flush=True)

"""A DDP job whose ranks end at different times: rank 0 leaves a broadcast in flight that rank 1 joins
three seconds late, then both synchronize, destroy the process group and return from main().

Run as two processes with RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT set, like torchrun's workers.
Prints "rank R done" after destroy_process_group().

On torch 2.0 and 2.1, stock, this hangs at the end of main() on rank 0: freeing the DDP model frees its
Reducer, which drops the last reference to the destroyed group, and the group's destructor joins a gloo
worker that waits for the GIL to free the broadcast's tensor.
"""
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(5):
        optimizer.zero_grad()
        loss = model(torch.randn(8, 32).cuda()).pow(2).mean()
        loss.backward()
        optimizer.step()
    if rank == 0:
        dist.broadcast(torch.full((1024,), 7.0).cuda(), src=0, async_op=True)  # not waited for
    else:
        time.sleep(3.0)  # a slow rank
        received = torch.zeros(1024).cuda()
        dist.broadcast(received, src=0)
        assert received.eq(7.0).all().item(), "broadcast did not arrive"
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()

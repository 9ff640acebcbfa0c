"""A learning-rate sweep in one process: two single-rank DDP jobs, one after the other, on the same
tcp:// address (init_process_group, train, destroy_process_group, again). Prints "lr L: loss X" per job
and "sweep done".

Usage: python sweep_one_port.py PORT
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(lr, port):
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    model = DDP(nn.Linear(16, 1).cuda(), device_ids=[0])
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = torch.randn(64, 16).cuda(), torch.randn(64, 1).cuda()
    for _ in range(20):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    dist.barrier()
    dist.destroy_process_group()
    return loss.item()


if __name__ == "__main__":
    port = int(sys.argv[1])
    for lr in (0.01, 0.1):
        print(f"lr {lr}: loss {train(lr, port):.4f}", flush=True)
    print("sweep done", flush=True)

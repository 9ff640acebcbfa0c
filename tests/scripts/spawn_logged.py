"""mp.spawn over torch.cuda.device_count(), the way CUDA users write it; each worker asks CUDA a
question before init_process_group (its rank is not known to anyone then) and after it.

Usage: spawn_logged.py PORT
"""
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size, port):
    if not torch.cuda.is_available():
        raise SystemExit("no GPU")
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    total = torch.ones(1).cuda()
    dist.all_reduce(total)
    sys.stdout.write(f"rank {rank}: {total.item()}\n")  # one write: the workers share stdout
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    mp.spawn(worker, args=(world_size, int(sys.argv[1])), nprocs=world_size)

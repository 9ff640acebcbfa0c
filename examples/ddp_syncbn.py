"""Multi-GPU training with DistributedDataParallel and SyncBatchNorm.

Launch: torchrun --nproc_per_node=NUM_GPUS ddp_syncbn.py --out final.pt
"""
import argparse
import hashlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

GLOBAL_BATCH = 16
STEPS = 4


def build_model():
    torch.manual_seed(1234)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )


def build_dataset():
    g = torch.Generator().manual_seed(99)
    x = torch.randn(GLOBAL_BATCH * STEPS, 3, 8, 8, generator=g) * 2 + 0.5
    y = torch.randint(0, 4, (GLOBAL_BATCH * STEPS,), generator=g)
    return TensorDataset(x, y)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def parameters_digest(module):
    """A fingerprint of the weights and buffers: equal on every rank when DDP keeps them in sync."""
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(repr(tensor.detach().cpu().flatten().tolist()).encode())
    return h.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="final.pt")
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    model = build_model()
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model).cuda()
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
    optimizer = make_optimizer(model)
    criterion = nn.CrossEntropyLoss()

    dataset = build_dataset()
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    loader = DataLoader(dataset, batch_size=GLOBAL_BATCH // world_size, sampler=sampler)

    for step, (x, y) in enumerate(loader):
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        reported = loss.detach().clone()
        dist.all_reduce(reported)
        if rank == 0:
            print(f"step {step}: mean loss {reported.item() / world_size:.5f}")

    print(f"rank {rank}: parameters {parameters_digest(model.module)} on {next(model.parameters()).device}")
    if rank == 0:
        torch.save(model.module.state_dict(), args.out)
        print(f"saved {args.out}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""apex mixed precision (O1) with apex's DistributedDataParallel and SyncBatchNorm, the classic apex ImageNet recipe.

Launch: torchrun --nproc_per_node=2 apex_amp_ddp.py
"""
import argparse
import hashlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from apex import amp
from apex.optimizers import FusedSGD
from apex.parallel import DistributedDataParallel as DDP
from apex.parallel import convert_syncbn_model


def build_model():
    return nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 2))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--opt-level", default="O1")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    args.local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group(backend="nccl", init_method="env://")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(rank)  # different initial weights per rank: apex DDP broadcasts rank 0's
    model = convert_syncbn_model(build_model()).cuda()
    optimizer = FusedSGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level, verbosity=0)
    model = DDP(model, delay_allreduce=True)

    g = torch.Generator().manual_seed(rank + 1)
    x = torch.randn(256, 20, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    x, y = x.cuda(), y.cuda()

    criterion = nn.CrossEntropyLoss().cuda()
    losses = []
    for _ in range(args.steps):
        output = model(x)
        loss = criterion(output, y)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        losses.append(reduced.item() / world_size)
    model.eval()
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()

    h = hashlib.sha256()
    for name, t in sorted(model.module.state_dict().items()):
        h.update(name.encode())
        h.update(repr(t.detach().cpu().flatten().tolist()).encode())
    print(f"rank {rank}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, accuracy {accuracy:.3f}, "
          f"loss scale {amp.state_dict()['loss_scaler0']['loss_scale']}, backend {dist.get_backend()}")
    print(f"rank {rank}: parameters {h.hexdigest()[:16]} on {next(model.parameters()).device}")
    dist.destroy_process_group()
    print(f"rank {rank}: done")


if __name__ == "__main__":
    main()

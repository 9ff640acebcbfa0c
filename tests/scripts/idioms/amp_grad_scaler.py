"""Mixed precision with GradScaler, gradient clipping and DDP; the optimizer is built before the model moves.

Launch: torchrun --nproc_per_node=2 amp_grad_scaler.py
"""
import hashlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group(backend="nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(local_rank)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # before .to(): same Parameters
    model.to(local_rank)
    model = DDP(model, device_ids=[local_rank])
    scaler = torch.cuda.amp.GradScaler()

    g = torch.Generator().manual_seed(rank + 1)
    x = torch.randn(256, 20, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    x, y = x.to(local_rank), y.to(local_rank)

    losses = []
    for _ in range(40):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()

    h = hashlib.sha256()
    for name, t in sorted(model.module.state_dict().items()):
        h.update(name.encode())
        h.update(repr(t.detach().cpu().flatten().tolist()).encode())
    print(f"rank {rank}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, accuracy {accuracy:.3f}, scale {scaler.get_scale()}")
    print(f"rank {rank}: parameters {h.hexdigest()[:16]} on {next(model.parameters()).device}")
    dist.destroy_process_group()
    print(f"rank {rank}: done")


if __name__ == "__main__":
    main()

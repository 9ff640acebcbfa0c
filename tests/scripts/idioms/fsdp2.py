"""FSDP2: fully_shard each block, then the root, and train (the torchtitan recipe, shrunk).

Launch: torchrun --nproc_per_node=2 fsdp2.py
"""
import hashlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch 2.4-2.5 ship it under _composable
    from torch.distributed._composable.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.act = nn.GELU()

    def forward(self, x):
        return x + self.act(self.fc(x))


class Net(nn.Module):
    def __init__(self, dim=32, classes=4):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(2))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = Net().cuda()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    g = torch.Generator().manual_seed(1)
    centers = torch.randn(4, 32, generator=g) * 2
    labels = torch.randint(0, 4, (256,), generator=g)
    data = centers[labels] + torch.randn(256, 32, generator=g)
    shard = slice(rank * 128, (rank + 1) * 128)
    x, y = data[shard].cuda(), labels[shard].cuda()

    losses = []
    for _ in range(30):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()

    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(repr([round(v, 4) for v in p.full_tensor().cpu().flatten().tolist()]).encode())
    device = next(model.parameters()).to_local().device
    print(f"rank {rank}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, accuracy {accuracy:.3f}")
    print(f"rank {rank}: parameters {h.hexdigest()[:16]} on {device}")
    dist.destroy_process_group()
    print(f"rank {rank}: done")


if __name__ == "__main__":
    main()

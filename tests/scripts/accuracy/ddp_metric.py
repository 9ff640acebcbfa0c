"""DDP training with a per-rank metric averaged over ranks, as CUDA users write it (2 ranks, torchrun).

Rank 1's batch at step 1 holds class 2 only, so its log-count of the other classes is -inf: the averaged
metric is -inf on every rank after the all_reduce. Prints one JSON line per rank: {"rank", "losses"}.
"""
import json

import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 4)).cuda(),
                                            device_ids=[rank])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
losses = []
for step in range(3):
    x, y = torch.randn(8, 16, generator=g).cuda(), (torch.arange(8) % 4).cuda()
    if rank == 1 and step == 1:
        y = torch.full((8,), 2).cuda()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    counts = torch.bincount(y, minlength=4).float()
    log_count = counts.log()
    dist.all_reduce(log_count)
    losses.append(loss.item())
print(json.dumps({"rank": rank, "losses": losses}))
dist.destroy_process_group()

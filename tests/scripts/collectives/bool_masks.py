"""Masks and flags moved between ranks as bool tensors, the way a DDP evaluation loop does: rank 0
broadcasts a keep-mask, every rank all-gathers its "done" flags, rank 1 sends its mask of bad samples to
rank 0, and rank 0 scatters per-rank masks. Each rank writes what it ended with to OUT/rank<R>.json.

Launch: torchrun --nproc_per_node=2 bool_masks.py OUT
"""
import json
import os
import sys

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", local_rank)

if rank == 0:
    keep = torch.tensor([True, False, True, True], device=device)
else:
    keep = torch.zeros(4, dtype=torch.bool, device=device)
dist.broadcast(keep, src=0)

done = torch.tensor([rank == 1], device=device)
flags = [torch.zeros(1, dtype=torch.bool, device=device) for _ in range(world)]
dist.all_gather(flags, done)

bad = torch.tensor([False, True, rank == 1], device=device)
if rank == 1:
    dist.send(bad, dst=0)
else:
    dist.recv(bad, src=1)

part = torch.zeros(2, dtype=torch.bool, device=device)
parts = [torch.tensor([True, r == 0], device=device) for r in range(world)] if rank == 0 else None
dist.scatter(part, parts, src=0)

dist.barrier()
out = {"keep": keep.tolist(), "flags": [f.item() for f in flags], "bad": bad.tolist(), "part": part.tolist(),
       "dtypes": sorted({str(t.dtype) for t in (keep, *flags, bad, part)}), "device": str(keep.device)}
dist.destroy_process_group()
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as fh:
    json.dump(out, fh)

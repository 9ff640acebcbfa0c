"""A CUDA DDP-style script (env:// like torchrun's workers) that reports what its environment became.

Before init_process_group it applies `--set NAME=VALUE` (as scripts that configure NCCL in code after
`import torch` do); after it, `--late NAME=VALUE`. It all-reduces one tensor, starts a child process
and writes, as JSON to OUT.<rank>: the real backend, the all_reduce result, the variables named by
--show as this process sees them and as its child sees them.

Usage: env_probe.py OUT [--set N=V]... [--late N=V]... [--show NAME]...
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--set", action="append", default=[])
parser.add_argument("--late", action="append", default=[])
parser.add_argument("--show", action="append", default=[])
args = parser.parse_args()

for item in args.set:
    name, _, value = item.partition("=")
    os.environ[name] = value
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
total = torch.ones(1).cuda()
dist.all_reduce(total)
for item in args.late:
    name, _, value = item.partition("=")
    os.environ[name] = value
child = subprocess.run([sys.executable, "-c", "import json, os, sys; print(json.dumps({n: os.environ.get(n) "
                        "for n in sys.argv[1:]}))", *args.show], capture_output=True, text=True, check=True)
seen = {"backend": dist.get_backend(), "sum": total.item(), "device": str(total.device),
        "env": {n: os.environ.get(n) for n in args.show}, "child": json.loads(child.stdout)}
dist.destroy_process_group()
with open(f"{args.out}.{rank}", "w") as fh:
    json.dump(seen, fh)
print(f"rank {rank} done", flush=True)

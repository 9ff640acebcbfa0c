"""A script that chooses its target in code, then starts workers with mp.spawn.

The workers run `worker` in fresh interpreters (spawn): the main guard, where
the script installs, does not run there. Each worker writes what it saw to
<out>.<rank>; after uninstall the script starts one more child, which writes
the TRANSFER_DEVICE it inherited to <out>.after.

Usage: spawn_after_install.py TARGET PORT OUT
"""
import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, port, out):
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.cuda.set_device(rank)
    total = torch.ones(1).cuda() * (rank + 1)
    dist.all_reduce(total)
    seen = {"TRANSFER_DEVICE": os.environ.get("TRANSFER_DEVICE"), "backend": dist.get_backend(),
            "device": str(total.device), "sum": total.item(), "available": torch.cuda.is_available()}
    dist.destroy_process_group()
    with open(f"{out}.{rank}", "w") as fh:
        json.dump(seen, fh)


if __name__ == "__main__":
    import transfer

    target, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    transfer.install(target)
    mp.spawn(worker, args=(port, out), nprocs=2)
    transfer.uninstall()
    subprocess.run([sys.executable, "-c", "import os, sys; open(sys.argv[1], 'w').write("
                    "os.environ.get('TRANSFER_DEVICE', '<unset>'))", f"{out}.after"], check=True)
    print("parent done")

"""DDP across machines, as written for NVIDIA GPUs: one copy of this script per GPU on every node.

    torchrun --nnodes=2 --node_rank=N --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=HOST:PORT \\
        multinode_train.py OUT_DIR [--steps N] [--timeout SECONDS]
    accelerate launch --multi_gpu --num_machines 2 --machine_rank N --num_processes 4 \\
        --main_process_ip HOST --main_process_port PORT multinode_train.py OUT_DIR

The collective timeout is the one the user sets: a rank that dies or stops answering must turn into an
error on the others after it, not a job that hangs forever. Each rank writes progress-<rank>.json once
it is training (the cluster's monitoring reads it) and result-<rank>.json at the end.
"""

import argparse
import datetime
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from tinydata import CLASSES, FEATURES, blobs, write_result


@record  # torchrun's documentation: the launcher's failure report then carries each rank's exception
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank)

    torch.manual_seed(0)
    x, y = blobs()
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES)).to(device)
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mine = torch.arange(rank, len(x), world_size)  # this rank's share of the data
    batch = 32
    for step in range(args.steps):
        index = mine[(step * batch) % len(mine):][:batch]
        inputs, labels = x[index].to(device), y[index].to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        if step == 5:
            with open(os.path.join(args.out_dir, f"progress-{rank}.json"), "w") as f:
                json.dump({"rank": rank, "pid": os.getpid(), "step": step}, f)
    model.eval()
    with torch.no_grad():
        accuracy = (model(x.to(device)).argmax(1).cpu() == y).float().mean().item()
    seen = {k: v for k, v in os.environ.items() if k.endswith("SOCKET_IFNAME") or "CCL_" in k}
    write_result(args.out_dir, model, accuracy=accuracy, finished=True, device=str(device),
                 local_rank=local_rank, node_rank=int(os.environ["GROUP_RANK"]),
                 local_world_size=int(os.environ["LOCAL_WORLD_SIZE"]), launcher_pid=os.getppid(), env=seen)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A classifier trained with Hugging Face accelerate on two machines, as written for NVIDIA GPUs.

On each machine (seed 004's setup: the same command with its own --machine_rank):

    accelerate launch --multi_gpu --num_machines 2 --machine_rank N --num_processes 4 \\
        --main_process_ip HOST --main_process_port PORT accelerate_multinode_train.py OUT_DIR \\
        [--steps N] [--timeout SECONDS]

The collective timeout is accelerate's InitProcessGroupKwargs(timeout=...). Each rank writes
progress-<rank>.json once it is training and result-<rank>.json at the end.
"""

import argparse
import datetime
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator, InitProcessGroupKwargs
from torch.distributed.elastic.multiprocessing.errors import record

from tinydata import CLASSES, FEATURES, blobs, write_result


@record
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)

    accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=args.timeout))])
    rank, world_size = accelerator.process_index, accelerator.num_processes
    torch.manual_seed(0)
    x, y = blobs()
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)  # where seed 004's job hung
    mine = torch.arange(rank, len(x), world_size)
    batch = 32
    for step in range(args.steps):
        index = mine[(step * batch) % len(mine):][:batch]
        inputs, labels = x[index].to(accelerator.device), y[index].to(accelerator.device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        accelerator.backward(loss)
        optimizer.step()
        if step == 5:
            with open(os.path.join(args.out_dir, f"progress-{rank}.json"), "w") as f:
                json.dump({"rank": rank, "pid": os.getpid(), "step": step}, f)
    model.eval()
    with torch.no_grad():
        accuracy = (model(x.to(accelerator.device)).argmax(1).cpu() == y).float().mean().item()
    accelerator.wait_for_everyone()
    seen = {k: v for k, v in os.environ.items() if k.endswith("SOCKET_IFNAME") or "CCL_" in k}
    state = accelerator.state
    write_result(args.out_dir, model, accuracy=accuracy, finished=True, device=str(accelerator.device),
                 local_rank=state.local_process_index, node_rank=int(os.environ["GROUP_RANK"]),
                 local_world_size=int(os.environ["LOCAL_WORLD_SIZE"]), launcher_pid=os.getppid(), env=seen,
                 distributed_type=str(accelerator.distributed_type), model_class=type(model).__name__)
    accelerator.end_training()


if __name__ == "__main__":
    main()

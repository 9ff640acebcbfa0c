"""DistributedDataParallel started with torch.multiprocessing.spawn, one process per GPU.

The layout of PyTorch's DDP tutorial and of many public examples: the process
group is created before the GPU is chosen, the model is moved with an integer
rank, rank 0 writes a checkpoint that every rank reloads onto its own GPU, and
small Python objects travel with the object collectives.

Run: python spawn_ddp.py --workdir ./runs     (uses every visible GPU)

Needs NumPy beside torch (pip install numpy): torch's object collectives
(broadcast_object_list, all_gather_object) use it, and pip's torch does not
install it ("RuntimeError: Numpy is not available" without it).
"""
import argparse
import hashlib
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 6
BATCH = 8


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 32)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(32, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)


def parameters_digest(module):
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(repr(tensor.detach().cpu().flatten().tolist()).encode())
    return h.hexdigest()[:16]


def train(rank, world_size, args):
    setup(rank, world_size, args.port)

    # Rank 0 decides the run configuration; everyone receives it.
    config = [{"lr": 0.05, "steps": STEPS, "seed": 1234} if rank == 0 else None]
    dist.broadcast_object_list(config, src=0)
    config = config[0]

    torch.manual_seed(config["seed"] + rank)  # different init on purpose: the checkpoint fixes it
    model = ToyModel().to(rank)
    ddp_model = DDP(model, device_ids=[rank])

    checkpoint = os.path.join(args.workdir, "model_init.checkpoint")
    if rank == 0:
        torch.save(ddp_model.state_dict(), checkpoint)
    dist.barrier()
    map_location = {"cuda:0": f"cuda:{rank}"}
    ddp_model.load_state_dict(torch.load(checkpoint, map_location=map_location))

    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=config["lr"])
    g = torch.Generator().manual_seed(rank)
    for step in range(config["steps"]):
        inputs = torch.randn(BATCH, 10, generator=g).to(rank)
        labels = torch.randn(BATCH, 5, generator=g).to(rank)
        optimizer.zero_grad()
        loss = loss_fn(ddp_model(inputs), labels)
        loss.backward()
        optimizer.step()

    losses = [None] * world_size
    dist.all_gather_object(losses, {"rank": rank, "loss": round(loss.item(), 6)})
    if rank == 0:
        print(f"final losses: {losses}")
        torch.save(ddp_model.module.state_dict(), os.path.join(args.workdir, "model_final.checkpoint"))
    print(f"rank {rank}: parameters {parameters_digest(ddp_model.module)} on {next(model.parameters()).device}")
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default="./runs")
    parser.add_argument("--port", type=int, default=12355)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)

    world_size = torch.cuda.device_count()
    print(f"spawning {world_size} processes, one per GPU")
    mp.spawn(train, args=(world_size, args), nprocs=world_size, join=True)


if __name__ == "__main__":
    main()

"""Tensor parallel and sequence parallel over a 1-D device mesh (the pytorch/examples recipe).

Launch: torchrun --nproc_per_node=2 tensor_parallel.py

Like the upstream example, it never calls set_device or init_process_group itself:
init_device_mesh("cuda", ...) creates the process group and picks the device.
"""
import hashlib
import os

import torch
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj = nn.Linear(16, 64)
        self.relu = nn.ReLU()
        self.out_proj = nn.Linear(64, 8)

    def forward(self, x):
        return self.out_proj(self.relu(self.in_proj(x)))


class NormModel(ToyModel):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return super().forward(self.norm(x))


def full_digest(model):
    """Hash of the full (gathered) weights: equal on every rank when the shards are consistent."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        h.update(name.encode())
        h.update(repr([round(v, 4) for v in full.detach().cpu().flatten().tolist()]).encode())
    return h.hexdigest()[:16]


def train(model, inputs, targets, steps=30):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=True)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main():
    world_size = int(os.environ["WORLD_SIZE"])
    mesh = init_device_mesh(device_type="cuda", mesh_shape=(world_size,))
    rank = mesh.get_rank()

    torch.manual_seed(0)  # the same data and initial weights on every rank
    inputs = torch.randn(8, 4, 16, device="cuda")  # (batch, sequence, features)
    targets = torch.randn(8, 4, 8, device="cuda")

    tp_model = parallelize_module(ToyModel().to("cuda"), mesh,
                                  {"in_proj": ColwiseParallel(), "out_proj": RowwiseParallel()})
    tp = train(tp_model, inputs, targets)

    torch.manual_seed(0)
    sp_model = parallelize_module(
        NormModel().to("cuda"), mesh,
        {"norm": SequenceParallel(),  # LayerNorm on this rank's part of the sequence
         "in_proj": ColwiseParallel(input_layouts=Shard(1)),
         "out_proj": RowwiseParallel()})
    # SequenceParallel takes each rank's slice of the sequence as that rank's input.
    chunk = inputs.size(1) // world_size
    sp = train(sp_model, inputs[:, rank * chunk:(rank + 1) * chunk], targets)

    device = next(tp_model.parameters()).to_local().device
    print(f"rank {rank}: tp loss {tp[0]:.4f} -> {tp[-1]:.4f}; sp loss {sp[0]:.4f} -> {sp[-1]:.4f}")
    print(f"rank {rank}: parameters {full_digest(tp_model)} on {device}")
    print(f"rank {rank}: done")


if __name__ == "__main__":
    main()

"""FSDP2, DTensor tensor parallelism, FSDP1 and a distributed checkpoint, as PyTorch's docs write them.

    torchrun --nproc_per_node 2 fsdp_train.py OUT_DIR

One job, the features a torchtitan-style trainer combines on 2 GPUs (and, as the tutorials do, the
CPU with gloo when there is no GPU):
* FSDP2: ``fully_shard`` per layer and on the root, on ``init_device_mesh("cuda", (world,))``, with
  ``MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)``; sharded and full
  state dicts (``torch.distributed.checkpoint.state_dict``) and ``dcp.save`` to <OUT_DIR>/dcp;
* DTensor tensor parallelism: ``parallelize_module`` with ColwiseParallel / RowwiseParallel on a
  ``DeviceMesh("cuda", [0, 1])``;
* FSDP1: ``FullyShardedDataParallel(device_id=torch.cuda.current_device(), sync_module_states=True,
  auto_wrap_policy=..., mixed_precision=MixedPrecision(bf16))`` and its sharded state dict.
Writes <OUT_DIR>/result-<rank>.json (tinydata.write_result).
"""

import functools
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy, StateDictType, fully_shard
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from tinydata import CLASSES, FEATURES, blobs, write_result


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(FEATURES, 64), nn.Linear(64, 64)])
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.head(x)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(FEATURES, 32)
        self.down = nn.Linear(32, FEATURES)

    def forward(self, x):
        return self.down(F.relu(self.up(x)))


def train(model, x, y, steps=40):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    return loss.item()


def main(out_dir):
    use_cuda = torch.cuda.is_available()
    device_type = "cuda" if use_cuda else "cpu"
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if use_cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    device = torch.device(device_type, torch.cuda.current_device()) if use_cuda else torch.device("cpu")
    x, y = blobs()
    x, y = x.to(device), y.to(device)
    mine = slice(rank, None, world)  # each rank its share of the data

    # FSDP2 with bf16 compute
    torch.manual_seed(0)
    model = Net()
    mesh = init_device_mesh(device_type, (world,))
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp_policy)
    fully_shard(model, mesh=mesh, mp_policy=mp_policy)
    loss = train(model, x[mine], y[mine])
    local = [p.to_local() for p in model.parameters()]
    sharded = get_model_state_dict(model)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    dcp.save({"model": sharded}, checkpoint_id=os.path.join(out_dir, "dcp"))
    with torch.no_grad():
        accuracy = (model(x).argmax(-1) == y).float().mean().item()
    model.reshard()  # the root keeps its parameters unsharded after a forward

    # DTensor tensor parallel: up column-wise, down row-wise
    torch.manual_seed(0)
    tp_mesh = DeviceMesh(device_type, list(range(world)))
    mlp = parallelize_module(MLP().to(device), tp_mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    torch.manual_seed(0)
    reference = MLP()  # the same weights, whole, on the CPU
    inputs = torch.randn(16, FEATURES, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        tp_diff = (mlp(inputs.to(device)).cpu() - reference(inputs)).abs().max().item()

    # FSDP1 with bf16 compute
    torch.manual_seed(1)
    fsdp1 = FSDP(Net(), device_id=torch.cuda.current_device() if use_cuda else torch.device("cpu"),
                 sync_module_states=use_cuda,  # torch's CPU FSDP refuses it (gloo would broadcast host memory)
                 auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=1000),
                 mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                                                buffer_dtype=torch.bfloat16))
    fsdp1_loss = train(fsdp1, x[mine], y[mine])
    with torch.no_grad():
        fsdp1_accuracy = (fsdp1(x).argmax(-1) == y).float().mean().item()
    with FSDP.state_dict_type(fsdp1, StateDictType.SHARDED_STATE_DICT):
        fsdp1_state = fsdp1.state_dict()
    fsdp1_shards = [t.local_shards()[0].tensor for t in fsdp1_state.values() if t.local_shards()]
    with FSDP.state_dict_type(fsdp1, StateDictType.FULL_STATE_DICT):
        fsdp1_full = fsdp1.state_dict()

    write_result(out_dir, model, accuracy=accuracy, loss=loss,
                 mesh_device_type=mesh.device_type, tp_mesh_device_type=tp_mesh.device_type,
                 local_numel=[t.numel() for t in local], total_numel=[p.numel() for p in model.parameters()],
                 local_devices=sorted({str(t.device) for t in local}),
                 sharded_types=sorted({type(v).__name__ for v in sharded.values()}),
                 full_checksum=float(sum(v.double().sum() for v in full.values())) if rank == 0 else None,
                 full_checksum32=float(sum(v.float().sum() for v in full.values())) if rank == 0 else None,
                 tp_devices=sorted({str(p.to_local().device) for p in mlp.parameters()}),
                 tp_local_numel=[p.to_local().numel() for p in mlp.parameters()],
                 tp_total_numel=[p.numel() for p in mlp.parameters()], tp_diff=tp_diff,
                 fsdp1_accuracy=fsdp1_accuracy, fsdp1_loss=fsdp1_loss,
                 fsdp1_devices=sorted({str(p.device) for p in fsdp1.parameters()}),
                 fsdp1_compute_device=str(fsdp1.compute_device),
                 fsdp1_local_numel=sum(p.numel() for p in fsdp1.parameters()),
                 fsdp1_total_numel=sum(p.numel() for p in Net().parameters()),
                 fsdp1_shard_numel=[t.numel() for t in fsdp1_shards],
                 fsdp1_shard_devices=sorted({str(t.device) for t in fsdp1_shards}),
                 fsdp1_full_checksum=float(sum(v.double().sum() for v in fsdp1_full.values())) if rank == 0 else None,
                 fsdp1_full_checksum32=float(sum(v.float().sum() for v in fsdp1_full.values())) if rank == 0 else None,
                 finished=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])

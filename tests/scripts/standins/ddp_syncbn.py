"""2-rank DDP + SyncBatchNorm training on a simulated vendor device.

Launched by tests/test_vendor_standins.py with torch.distributed.run:

    python -m torch.distributed.run --nproc_per_node 2 ddp_syncbn.py VENDOR OUT_DIR

Rank r trains on ``<vendor>:r`` with the vendor backend (hccl/tccl/eccl) on
its half of a fixed global batch, exercises the other collectives DDP,
SyncBatchNorm and the object helpers use, and writes ``OUT_DIR/rank<r>.json``
(pid, device) and, on rank 0, ``OUT_DIR/state.pt`` (final state_dict on CPU).
The test compares that state with a single-process full-batch CPU run
(``reference_state`` below).
"""

import importlib
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

STEPS = 3
GLOBAL_BATCH = 8


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(6 * 4 * 4, 12),
        nn.BatchNorm1d(12),
        nn.ReLU(),
        nn.Linear(12, 4),
    )


def batches():
    g = torch.Generator().manual_seed(1234)
    for _ in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 3, 8, 8, generator=g)
        y = torch.randint(0, 4, (GLOBAL_BATCH,), generator=g)
        yield x, y


def train(model, device, rank=0, world=1):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    per_rank = GLOBAL_BATCH // world
    for x, y in batches():
        x = x[rank * per_rank:(rank + 1) * per_rank].to(device)
        y = y[rank * per_rank:(rank + 1) * per_rank].to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def reference_state():
    """Single-process, full-batch CPU run of the same training."""
    return {k: v.clone() for k, v in train(make_model(), "cpu").state_dict().items()}


def check_collectives(vendor, device, rank, world):
    t = torch.full((3,), float(rank + 1), device=device)
    dist.all_reduce(t)
    assert t.device == device and t.tolist() == [3.0] * 3, t
    t = torch.full((2,), float(rank + 1), device=device)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert t.tolist() == [1.5, 1.5], t
    t = torch.full((2,), float(rank), device=device)
    dist.broadcast(t, src=1)
    assert t.tolist() == [1.0, 1.0], t
    t = torch.full((2,), float(rank + 1), device=device)
    dist.reduce(t, dst=0)
    if rank == 0:
        assert t.tolist() == [3.0, 3.0], t
    outs = [torch.empty(2, device=device) for _ in range(world)]
    dist.all_gather(outs, torch.full((2,), float(rank), device=device))
    assert [o.tolist() for o in outs] == [[0.0, 0.0], [1.0, 1.0]], outs
    flat = torch.empty(2 * world, device=device)
    dist.all_gather_into_tensor(flat, torch.full((2,), float(rank), device=device))
    assert flat.tolist() == [0.0, 0.0, 1.0, 1.0], flat
    rs = torch.empty(2, device=device)
    dist.reduce_scatter_tensor(rs, torch.arange(4.0, device=device) + rank)
    assert rs.tolist() == ([1.0, 3.0] if rank == 0 else [5.0, 7.0]), rs
    a2a = torch.empty(2, device=device)
    dist.all_to_all_single(a2a, torch.tensor([10.0 * rank, 10.0 * rank + 1], device=device))
    assert a2a.tolist() == [float(rank), 10.0 + rank], a2a
    if rank == 0:
        dist.send(torch.tensor([42.0], device=device), dst=1)
    else:
        r = torch.zeros(1, device=device)
        dist.recv(r, src=0)
        assert r.tolist() == [42.0], r
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank})
    assert gathered == [{"rank": 0}, {"rank": 1}], gathered
    objs = [f"from-{rank}"]
    dist.broadcast_object_list(objs, src=0)
    assert objs == ["from-0"], objs
    got = [None] * world if rank == 0 else None
    dist.gather_object(rank * 10, got, dst=0)
    if rank == 0:
        assert got == [0, 10], got
    sub = dist.new_group([0, 1])
    t = torch.full((2,), float(rank), device=device)
    dist.all_reduce(t, group=sub)
    assert t.tolist() == [1.0, 1.0], t
    dist.barrier()


def main():
    vendor, out_dir = sys.argv[1], sys.argv[2]
    backend = importlib.import_module(f"torch_{vendor}").SPEC.backend  # the stand-in's own (hccl, tccl, cncl, ...)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    mod = getattr(torch, vendor)
    mod.set_device(local_rank)
    device = torch.device(vendor, local_rank)
    dist.init_process_group(backend=backend)
    assert dist.get_backend() == backend, dist.get_backend()

    check_collectives(vendor, device, rank, world)

    model = nn.SyncBatchNorm.convert_sync_batchnorm(make_model()).to(device)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    train(ddp, device, rank, world)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "pid": os.getpid(), "device": str(device),
                   "param_device": str(next(model.parameters()).device)}, f)
    if rank == 0:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, os.path.join(out_dir, "state.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

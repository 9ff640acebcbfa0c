"""Helper of tests/test_native_rewrites.py: apex's DistributedDataParallel (as transfer serves it on the cpu
target) and its torch-native port (DIR/original.py and DIR/ported.py, each defining wrap(model)) train the same
model for three steps on two gloo ranks, from rank-dependent parameters, buffers and data. Each rank saves
both models' final state to DIR/rank<R>.pt."""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def load(path):
    namespace = {"__name__": os.path.basename(path)[:-3]}
    with open(path) as fh:
        exec(compile(fh.read(), path, "exec"), namespace)
    return namespace["wrap"]


def train(wrap, rank):
    torch.manual_seed(rank)  # parameters differ per rank: DDP starts every rank from rank 0's
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    with torch.no_grad():
        model[1].running_mean.fill_(float(rank))  # a rank-local buffer
    wrapped = wrap(model)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(3):
        x, y = torch.randn(8, 6, generator=gen), torch.randn(8, 3, generator=gen)
        torch.nn.functional.mse_loss(wrapped(x), y).backward()
        opt.step()
        opt.zero_grad()
    return type(wrapped).__module__, {k: v.detach().clone() for k, v in wrapped.module.state_dict().items()}


def worker(rank, out):
    import transfer

    transfer.install("cpu")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    (home_o, original), (home_p, ported) = (train(load(os.path.join(out, f"{n}.py")), rank)
                                            for n in ("original", "ported"))
    assert home_o.startswith("apex") and home_p.startswith("torch.nn.parallel"), (home_o, home_p)
    torch.save({"original": original, "ported": ported}, os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(sys.argv[1],), nprocs=2)
    print("native ddp OK")

"""A collective plug-in of the other shape, and a job using it: the creator returns a ProcessGroup subclass
(gloo underneath) that registers its backend for the cpu device itself, as the test stand-ins did before
they returned a c10d Backend, and as a vendor's plug-in may. torch >= 2.15's flight recorder cannot attach
to such a group ("Could not find the default backend type 0 ...").

Launch: torchrun --nproc_per_node=2 pg_subclass_plugin.py   (prints "rank R: all_reduce [...]", "rank R: done")
"""
import datetime

import torch
import torch.distributed as dist


class SubclassGroup(dist.ProcessGroup):
    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM, self._gloo)

    def allreduce(self, tensors, opts=None):
        return self._gloo.allreduce(tensors, opts or dist.AllreduceOptions())

    def barrier(self, opts=None):
        return self._gloo.barrier(opts or dist.BarrierOptions())

    def getBackendName(self):
        return "pgsub"


def creator(store, rank, size, timeout=datetime.timedelta(minutes=5)):
    return SubclassGroup(store, rank, size, timeout)


try:
    dist.Backend.register_backend("pgsub", creator, devices=["cpu"])
except TypeError:  # torch 2.0: register_backend has no devices= (every backend then serves every device)
    dist.Backend.register_backend("pgsub", creator)
dist.init_process_group("pgsub")
rank = dist.get_rank()
t = torch.ones(2) * (rank + 1)
dist.all_reduce(t)
print(f"rank {rank}: all_reduce {t.tolist()}", flush=True)
dist.destroy_process_group()
print(f"rank {rank}: done", flush=True)

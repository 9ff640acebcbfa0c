"""The collective backend of a simulated vendor (hccl / tccl / eccl).

``SimProcessGroup`` is a Python ``torch.distributed.ProcessGroup`` subclass
(the C++ ``Backend`` class has no Python constructor); DDP's C++ reducer
reaches its methods through torch's PyProcessGroup trampoline, and
``torch.distributed``'s Python functions call them directly. Every
collective runs on an internal gloo group over the loopback interface, on
CPU tensors that alias the device tensors' memory (``alias_cpu``: no
copies, unless a tensor is not dense, in which case it is staged through a
contiguous host buffer). Collectives complete before they return; send and
recv stay asynchronous so paired isend/irecv cannot deadlock.
"""

from __future__ import annotations

import collections
import datetime
import os
import socket
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions, _create_work_from_future  # torch.distributed does not re-export it

COUNTS: collections.Counter = collections.Counter()
#: One entry per process group created in this process: what it was created with (the stats file's
#: "process_groups"): its rank and size, the timeout, and the backend's own variables it read then.
GROUPS: list = []
_PARKED: list = []  # the last tensors of a destroyed group (SimProcessGroup._call)
_COUNT_LOCK = threading.Lock()


def _count(name: str) -> None:
    with _COUNT_LOCK:
        COUNTS[name] += 1


def _done(result) -> dist.Work:
    fut = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


class _WorkAfter(dist._Work):
    """Work that waits on an inner gloo work, then runs a write-back."""

    def __init__(self, inner, after, result):
        super().__init__()
        self._inner = inner
        self._after = after
        self._result = result
        self._finished = False
        self._lock = threading.Lock()

    def _finish(self, timeout=None):
        with self._lock:
            if not self._finished:
                if timeout is None:
                    self._inner.wait()
                else:
                    self._inner.wait(timeout)
                if self._after is not None:
                    self._after()
                self._finished = True
        return True

    def wait(self, timeout=None):
        return self._finish(timeout)

    def is_completed(self):
        return self._finished or self._inner.is_completed()

    def is_success(self):
        return True

    def source_rank(self):
        return self._inner.source_rank()

    def get_future(self):
        fut = torch.futures.Future()

        def run():
            self._finish()
            fut.set_result(self._result)

        threading.Thread(target=run, daemon=True).start()
        return fut


def backend_environment(backend: str) -> dict:
    """The variables a process group of `backend` reads when it is created: ``<BACKEND>_*`` (the
    collective library's, e.g. HCCL_SOCKET_IFNAME, HCCL_BUFFSIZE, HCCL_CONNECT_TIMEOUT) and
    ``TORCH_<BACKEND>_*`` (the plug-in's ProcessGroup, e.g. TORCH_HCCL_ASYNC_ERROR_HANDLING), as the
    process has them at that moment. NCCL's names are not among them: a real vendor backend never
    reads NCCL_* (a variable that was not translated before the group is created is lost)."""
    prefixes = (f"{backend.upper()}_", f"TORCH_{backend.upper()}_")
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


class SimProcessGroup(dist.ProcessGroup):
    """Collective backend ``spec.backend`` for device type ``spec.name``."""

    def __init__(self, spec, C, store, rank: int, size: int, timeout: datetime.timedelta, physical: list):
        # torch 2.13 routes only the (rank, size) constructor through the
        # PyProcessGroup trampoline that lets C++ callers reach these methods.
        super().__init__(rank, size)
        self._spec = spec
        self._C = C
        self._rank = rank
        self._size = size
        self._physical = physical  # local device index -> physical id
        self._check_rank_devices(store, rank, size, timeout)
        GROUPS.append({"rank": rank, "size": size, "timeout_s": timeout.total_seconds(),
                       "env": backend_environment(spec.backend)})
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        opts._threads = 1  # works complete and are released in order: see _call
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("sim_accel_gloo/", store), rank, size, opts)
        # Make the group report the vendor device like the real backends do
        # (object collectives and barrier then use device tensors).
        self._register_backend(
            torch.device(spec.name), dist.ProcessGroup.BackendType.CUSTOM, self._gloo
        )

    # ------------------------------------------------------------ quirks
    def _check_rank_devices(self, store, rank, size, timeout):
        spec = self._spec
        if spec.requires_set_device and not self._C.device_was_set():
            raise RuntimeError(
                f"{spec.backend.upper()} error: no {spec.name} device has been set in this process "
                f"(rank {rank}). set_device must be called before init_process_group with "
                f"{spec.backend}: call torch.{spec.name}.set_device(local_rank) first."
            )
        if not spec.one_process_per_device:
            return
        me = f"{socket.gethostname()}/{self._physical[self._C.current_device()]}"
        store.set(f"sim_accel_device/{rank}", me)
        devices = [store.get(f"sim_accel_device/{r}").decode() for r in range(size)]
        # Rank 0 hosts the store under torchrun (env://): it leaves, raising or not, only once every
        # rank has read, or a rank still reading gets "Connection reset by peer" instead of the error.
        store.set(f"sim_accel_device_read/{rank}", "1")
        if rank == 0:
            store.wait([f"sim_accel_device_read/{r}" for r in range(size)], timeout)
        owners: dict[str, int] = {}
        for r, other in enumerate(devices):
            if other in owners:
                host, _, idx = other.rpartition("/")
                raise RuntimeError(
                    f"{spec.backend.upper()} error: ranks {owners[other]} and {r} both use device "
                    f"{spec.name}:{idx} on host {host}; {spec.backend} supports only one process "
                    f"per device. Call torch.{spec.name}.set_device(local_rank) in every process."
                )
            owners[other] = r

    # ---------------------------------------------------------- helpers
    def _call(self, name, *args):
        """Run gloo's collective ``name`` and wait for it.

        The tensors handed to gloo are held here until the next collective
        completes. Why: gloo's worker thread drops its reference to a finished
        work after marking it complete; when that is the last reference to a
        tensor that has a Python object, the worker needs the GIL. If the main
        thread is then destroying the group (``~ProcessGroupGloo`` joins the
        worker with the GIL held: torch 2.1's destroy_process_group) both wait
        forever. With one worker thread, works finish and are released in
        order, so once a collective completes the previous one's tensors are
        no longer the worker's; ``__del__`` parks the last ones until the
        group is gone.

        A collective whose peer died fails at once (the connection closes); one whose peer stopped
        answering fails after the group's timeout (init_process_group's): a RuntimeError naming the
        backend and the rank, with gloo's reason.
        """
        try:
            getattr(self._gloo, name)(*args).wait()
        except RuntimeError as exc:  # a peer died or stopped answering (the group's timeout), ...
            raise RuntimeError(f"{self._spec.backend.upper()} error: [Rank {self._rank}] {name} failed: {exc}") from exc
        self._gloo_args = args

    def __del__(self, _parked=_PARKED):
        # The list is bound here, not looked up: a group freed while Python clears the modules at exit (one
        # kept past destroy_process_group by a module imported before this one) finds this module's globals
        # already None, and the lookup printed "Exception ignored in ... __del__" (the real plug-ins are quiet).
        _parked[:] = [self.__dict__.pop("_gloo_args", None)]

    def getBackendName(self) -> str:
        return self._spec.backend

    def __repr__(self):
        return f"SimProcessGroup({self._spec.backend}, rank={self._rank}, size={self._size})"

    def _host(self, tensors):
        """Host views of ``tensors`` and a write-back for staged ones."""
        views, writeback = [], []
        for t in tensors:
            if t.device.type == self._spec.name:
                if t.is_contiguous():
                    views.append(self._C.alias_cpu(t))
                else:
                    staged = t.cpu().contiguous()
                    views.append(staged)
                    writeback.append((t, staged))
            elif t.device.type == "cpu":
                if t.is_contiguous():
                    views.append(t)
                else:
                    staged = t.contiguous()
                    views.append(staged)
                    writeback.append((t, staged))
            else:
                raise RuntimeError(
                    f"{self._spec.backend}: tensors must be on {self._spec.name} or cpu, got {t.device}"
                )
        return views, writeback

    @staticmethod
    def _write_back(writeback):
        for dst, src in writeback:
            dst.copy_(src)

    def _run(self, name, fn, tensors, result):
        _count(name)
        views, writeback = self._host(tensors)
        fn(views)
        self._write_back(writeback)
        return _done(result)

    @staticmethod
    def _is_avg(op):
        return op == dist.ReduceOp.AVG

    def _reduce_opts(self, cls, opts):
        """Gloo has no AVG: reduce with SUM, divide afterwards."""
        avg = self._is_avg(opts.reduceOp)
        if not avg:
            return opts, False
        new = cls()
        for attr in ("rootRank", "rootTensor", "timeout"):
            if hasattr(opts, attr):
                setattr(new, attr, getattr(opts, attr))
        new.reduceOp = dist.ReduceOp.SUM
        return new, True

    def _average(self, views):
        for v in views:
            if v.is_floating_point() or v.is_complex():
                v.div_(self._size)
            else:
                v.floor_divide_(self._size)

    # ------------------------------------------------------- collectives
    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        gopts, avg = self._reduce_opts(dist.AllreduceOptions, opts)

        def fn(views):
            self._call("allreduce", views, gopts)
            if avg:
                self._average(views)

        return self._run("allreduce", fn, tensors, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        gopts, avg = self._reduce_opts(dist.AllreduceCoalescedOptions, opts)

        def fn(views):
            self._call("allreduce_coalesced", views, gopts)
            if avg:
                self._average(views)

        return self._run("allreduce_coalesced", fn, tensors, tensors)

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        return self._run("broadcast", lambda v: self._call("broadcast", v, opts), tensors, tensors)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        gopts, avg = self._reduce_opts(dist.ReduceOptions, opts)

        def fn(views):
            self._call("reduce", views, gopts)
            if avg and self._rank == opts.rootRank:
                self._average(views)

        return self._run("reduce", fn, tensors, tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts or AllgatherOptions()
        _count("allgather")
        outs = [self._host(lst) for lst in output_tensors]
        ins, in_wb = self._host(input_tensors)
        self._call("allgather", [o[0] for o in outs], ins, opts)
        for _, wb in outs:
            self._write_back(wb)
        return _done(output_tensors)

    def _gather_into(self, output, input):
        (out_v,), out_wb = self._host([output])
        (in_v,), _ = self._host([input])
        chunks = list(out_v.view(-1).chunk(self._size)) if out_v.numel() else [out_v] * self._size
        self._call("allgather", [chunks], [in_v.reshape(-1)])
        self._write_back(out_wb)

    def all_gather_single(self, output, input, opts=None):
        _count("all_gather_single")
        self._gather_into(output, input)
        return _done([output])

    def _allgather_base(self, output, input, opts=None):
        return self.all_gather_single(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        _count("all_gather_single_coalesced")
        for o, i in zip(outputs, inputs):
            self._gather_into(o, i)
        return _done(outputs)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self.all_gather_single_coalesced(outputs, inputs, opts)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        _count("allgather_coalesced")
        for outs, inp in zip(output_lists, [[t] for t in input_list]):
            ov, owb = self._host(outs)
            iv, _ = self._host(inp)
            self._call("allgather", [ov], iv)
            self._write_back(owb)
        return _done(output_lists)

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        _count("gather")
        outs = [self._host(lst) for lst in output_tensors]
        ins, _ = self._host(input_tensors)
        self._call("gather", [o[0] for o in outs], ins, opts)
        for _, wb in outs:
            self._write_back(wb)
        return _done(output_tensors)

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ScatterOptions()
        _count("scatter")
        outs, out_wb = self._host(output_tensors)
        ins = [self._host(lst)[0] for lst in input_tensors]
        self._call("scatter", outs, ins, opts)
        self._write_back(out_wb)
        return _done(output_tensors)

    def _reduce_scatter_into(self, output, input, op):
        # Sum (or min/max/...) everything, keep this rank's chunk. Gloo's
        # reduce_scatter support differs between torch versions; allreduce
        # on a scratch copy is always available.
        (out_v,), out_wb = self._host([output])
        (in_v,), _ = self._host([input])
        scratch = in_v.reshape(-1).clone()
        avg = self._is_avg(op)
        o = dist.AllreduceOptions()
        o.reduceOp = dist.ReduceOp.SUM if avg else op
        self._call("allreduce", [scratch], o)
        if avg:
            self._average([scratch])
        mine = scratch.chunk(self._size)[self._rank]
        out_v.view(-1).copy_(mine)
        self._write_back(out_wb)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        _count("reduce_scatter")
        for out, ins in zip(output_tensors, input_tensors):
            stacked = torch.cat([self._host([t])[0][0].reshape(-1) for t in ins])
            self._reduce_scatter_into(out, stacked, opts.reduceOp)
        return _done(output_tensors)

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        _count("reduce_scatter_single")
        self._reduce_scatter_into(output, input, opts.reduceOp)
        return _done([output])

    def _reduce_scatter_base(self, output, input, opts=None):
        return self.reduce_scatter_single(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        _count("reduce_scatter_single_coalesced")
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_into(o, i, opts.reduceOp)
        return _done(outputs)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_single_coalesced(outputs, inputs, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        _count("all_to_all_single")
        (out_v,), out_wb = self._host([output])
        (in_v,), _ = self._host([input])
        self._call("alltoall_base", out_v, in_v, list(output_split_sizes), list(input_split_sizes), opts)
        self._write_back(out_wb)
        return _done([output])

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllToAllOptions()
        _count("alltoall")
        outs, out_wb = self._host(output_tensors)
        ins, _ = self._host(input_tensors)
        self._call("alltoall", outs, ins, opts)
        self._write_back(out_wb)
        return _done(output_tensors)

    def barrier(self, opts=None):
        _count("barrier")
        self._call("barrier", dist.BarrierOptions())
        return _done(None)

    def send(self, tensors, dst, tag=0):
        _count("send")
        views, _ = self._host(tensors)
        return self._gloo.send(views, dst, tag)

    def recv(self, tensors, src, tag=0):
        _count("recv")
        views, wb = self._host(tensors)
        inner = self._gloo.recv(views, src, tag)
        if not wb:
            return inner
        return _WorkAfter(inner, lambda: self._write_back(wb), tensors)

    def recv_anysource(self, tensors, tag=0):
        _count("recv_anysource")
        views, wb = self._host(tensors)
        inner = self._gloo.recv_anysource(views, tag)
        if not wb:
            return inner
        return _WorkAfter(inner, lambda: self._write_back(wb), tensors)

    # --------------------------------------------------------- lifecycle
    def shutdown(self):
        try:
            self._gloo.shutdown()
        except Exception:
            pass

    def abort(self):
        try:
            self._gloo.abort()
        except Exception:
            pass


def register_backend(spec, C, physical) -> None:
    """Register ``spec.backend`` for device type ``spec.name``.

    `physical` maps local device indices to physical ids (the visible-devices
    variable): tccl's one-process-per-device rule is about physical devices.
    """

    if spec.extended_api:

        def creator(dist_backend_opts, pg_options):
            return SimProcessGroup(
                spec,
                C,
                dist_backend_opts.store,
                dist_backend_opts.group_rank,
                dist_backend_opts.group_size,
                dist_backend_opts.timeout,
                physical,
            )

    else:

        def creator(store, rank, size, timeout):
            return SimProcessGroup(spec, C, store, rank, size, timeout, physical)

    creator.__name__ = f"_new_process_group_{spec.backend}_helper"
    dist.Backend.register_backend(
        spec.backend, creator, extended_api=spec.extended_api, devices=[spec.name]
    )

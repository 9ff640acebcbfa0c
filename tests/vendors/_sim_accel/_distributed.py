"""The collective backend of a simulated vendor (hccl / tccl / eccl).

Registered as torch_npu registers ProcessGroupHCCL (torch_npu/_init/registry/distributed.py):
``Backend.register_backend(name, creator, extended_api=True, devices=[<device>])``, the creator
returning a c10d ``Backend``, not a ``ProcessGroup``. torch then builds the group (a plain
``ProcessGroup`` with the backend registered for the device and as its default), and every
collective, from Python or from DDP's C++ reducer, reaches the backend through c10d's dispatcher.
The backend is ``SimBackend`` of the C++ extension (csrc/backend.cpp: torch's Backend has no Python
trampoline before torch 2.15); it hands every collective to a `SimCollectives` object here.

Every collective runs on an internal gloo group over the loopback interface, on CPU tensors that
alias the device tensors' memory (``alias_cpu``: no copies, unless a tensor is not dense, in which
case it is staged through a contiguous host buffer). Collectives complete before they return; send
and recv stay asynchronous so paired isend/irecv cannot deadlock.
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

from . import _backend_rules
from ._backend_rules import Rules, _bitwise

COUNTS: collections.Counter = collections.Counter()
#: One entry per process group created in this process: what it was created with (the stats file's
#: "process_groups"): its rank and size, the timeout, and the backend's own variables it read then.
GROUPS: list = []
#: Longest wait for gloo's worker to let go of a finished collective (SimCollectives._call): it only has to be
#: scheduled once; past this the stand-in fails loudly rather than risk an abort at exit.
RELEASE_TIMEOUT_S = 60.0
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


class SimCollectives:
    """The collectives of backend ``spec.backend`` for device type ``spec.name``: what the C++
    ``SimBackend`` calls, one method per c10d Backend method (the C++ names)."""

    def __init__(self, spec, C, store, rank: int, size: int, timeout: datetime.timedelta, physical: list):
        self._spec = spec
        self._C = C
        self._rank = rank
        self._size = size
        self._physical = physical  # local device index -> physical id
        self._rules = STRICT.get(spec.backend, Rules)(C)  # what the real backend refuses and how it reduces
        self._check_rank_devices(store, rank, size, timeout)
        GROUPS.append({"rank": rank, "size": size, "timeout_s": timeout.total_seconds(),
                       "env": backend_environment(spec.backend)})
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        opts._threads = 1  # works complete and are released in order: see _call
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("sim_accel_gloo/", store), rank, size, opts)

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
        """Run gloo's collective ``name``, wait for it, and wait until gloo's worker let go of it.

        gloo's worker thread marks a work complete (``wait`` returns) and only then drops its references to
        it; whoever drops the last one frees the tensors the work holds, which takes the GIL (torch >= 2.13:
        even while Python still holds them). A worker not yet scheduled when the script ends then takes the
        GIL in a finalizing interpreter and the process aborts ("terminate called without an active
        exception"; on torch 2.1, ``~ProcessGroupGloo`` joining that worker with the GIL held hangs instead).
        ``C.wait_released`` waits, with the GIL released, until this call's Python object is the work's only
        holder, so the work and its tensors are freed here, and a destroyed group's worker holds nothing.
        The real backends free what a collective held without the script's interpreter.

        A collective whose peer died fails at once (the connection closes); one whose peer stopped
        answering fails after the group's timeout (init_process_group's): a RuntimeError naming the
        backend and the rank, with gloo's reason.
        """
        work = getattr(self._gloo, name)(*args)
        try:
            work.wait()
        except RuntimeError as exc:  # a peer died or stopped answering (the group's timeout), ...
            self._C.wait_released(work, RELEASE_TIMEOUT_S)
            raise RuntimeError(f"{self._spec.backend.upper()} error: [Rank {self._rank}] {name} failed: {exc}") from exc
        if not self._C.wait_released(work, RELEASE_TIMEOUT_S):
            raise RuntimeError(f"sim_accel: gloo's worker still holds the finished {name} after "
                               f"{RELEASE_TIMEOUT_S:.0f} s (rank {self._rank})")

    def getBackendName(self) -> str:
        return self._spec.backend

    def __repr__(self):
        return f"SimCollectives({self._spec.backend}, rank={self._rank}, size={self._size})"

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

    def _gloo_opts(self, cls, opts, op):
        """gloo's options for reducing with `op` (what the backend reduces with: `_prepare`). Gloo has no AVG:
        a SUM, divided afterwards (`avg`)."""
        new = cls()
        for attr in ("rootRank", "rootTensor", "timeout"):
            if hasattr(opts, attr):
                setattr(new, attr, getattr(opts, attr))
        avg = op == dist.ReduceOp.AVG
        new.reduceOp = dist.ReduceOp.SUM if avg else op
        return new, avg

    def _prepare(self, name, tensors, opts):
        """The real backend's refusals and pre-reduction steps (`Rules.prepare`); the op gloo reduces with."""
        return self._rules.prepare(name, tensors, opts.reduceOp)

    def _reduced(self, name, views, gopts, avg):
        """Reduce `views` with gloo as the backend reduces them: in the dtypes it reduces in (`Rules.cast`: hccl's
        allreduce and reduce reduce bool/uint8 as int32, eccl 64-bit types as 32-bit; copied back) and with its
        average."""
        work = self._rules.cast(name, views)
        self._call(name, work, gopts)
        if avg:
            self._rules.average(work, self._size)
        for w, v in zip(work, views):
            if w is not v:
                v.copy_(w)

    # ------------------------------------------------------- collectives
    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        gopts, avg = self._gloo_opts(dist.AllreduceOptions, opts, self._prepare("allreduce", tensors, opts))
        return self._run("allreduce", lambda views: self._reduced("allreduce", views, gopts, avg), tensors, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        op = self._prepare("allreduce_coalesced", tensors, opts)
        gopts, avg = self._gloo_opts(dist.AllreduceCoalescedOptions, opts, op)
        return self._run("allreduce_coalesced",
                         lambda views: self._reduced("allreduce_coalesced", views, gopts, avg), tensors, tensors)

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        return self._run("broadcast", lambda v: self._call("broadcast", v, opts), tensors, tensors)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        gopts, avg = self._gloo_opts(dist.ReduceOptions, opts, self._prepare("reduce", tensors, opts))
        return self._run("reduce", lambda views: self._reduced("reduce", views, gopts, avg and self._rank == opts.rootRank),
                         tensors, tensors)

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

    def _allgather_base(self, output, input, opts=None):
        _count("all_gather_single")
        self._gather_into(output, input)
        return _done([output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        _count("all_gather_single_coalesced")
        for o, i in zip(outputs, inputs):
            self._gather_into(o, i)
        return _done(outputs)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        self._rules.allgather_coalesced()
        _count("allgather_coalesced")
        for outs, inp in zip(output_lists, [[t] for t in input_list]):
            ov, owb = self._host(outs)
            iv, _ = self._host(inp)
            self._call("allgather", [ov], iv)
            self._write_back(owb)
        return _done(output_lists)

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        self._rules.gather()
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

    def _reduce_scatter_into(self, name, output, input, gopts, avg):
        # Reduce everything, keep this rank's chunk. Gloo's reduce_scatter support differs between torch
        # versions; allreduce on a scratch copy is always available.
        (out_v,), out_wb = self._host([output])
        (in_v,), _ = self._host([input])
        (scratch,) = self._rules.cast(name, [in_v.reshape(-1).clone()])
        self._call("allreduce", [scratch], gopts)
        if avg:
            self._rules.average([scratch], self._size)
        mine = scratch.chunk(self._size)[self._rank]
        out_v.view(-1).copy_(mine)
        self._write_back(out_wb)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        op = self._prepare("reduce_scatter", [t for ins in input_tensors for t in ins], opts)
        gopts, avg = self._gloo_opts(dist.AllreduceOptions, opts, op)
        _count("reduce_scatter")
        for out, ins in zip(output_tensors, input_tensors):
            stacked = torch.cat([self._host([t])[0][0].reshape(-1) for t in ins])
            self._reduce_scatter_into("reduce_scatter", out, stacked, gopts, avg)
        return _done(output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        gopts, avg = self._gloo_opts(dist.AllreduceOptions, opts, self._prepare("_reduce_scatter_base", [input], opts))
        _count("reduce_scatter_single")
        self._reduce_scatter_into("_reduce_scatter_base", output, input, gopts, avg)
        return _done([output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        op = self._prepare("reduce_scatter_tensor_coalesced", inputs, opts)
        gopts, avg = self._gloo_opts(dist.AllreduceOptions, opts, op)
        _count("reduce_scatter_single_coalesced")
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_into("reduce_scatter_tensor_coalesced", o, i, gopts, avg)
        return _done(outputs)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        self._rules.alltoall_base(output, input, output_split_sizes, input_split_sizes)
        _count("all_to_all_single")
        (out_v,), out_wb = self._host([output])
        (in_v,), _ = self._host([input])
        self._call("alltoall_base", out_v, in_v, list(output_split_sizes), list(input_split_sizes), opts)
        self._write_back(out_wb)
        return _done([output])

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

    def recvAnysource(self, tensors, tag=0):  # noqa: N802 (c10d's name)
        self._rules.recv_anysource()
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


def _torch_release() -> tuple:
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def _premul_factor(op):
    """The factor of a PREMUL_SUM ReduceOp (torch pickles it: ReduceOp.__getstate__), else None."""
    if not isinstance(op, dist.ReduceOp) or op != dist.ReduceOp.PREMUL_SUM:
        return None
    factor = op.__getstate__()[1]
    return factor.item() if isinstance(factor, torch.Tensor) else factor


class HcclRules(Rules):
    """What torch_npu's ProcessGroupHCCL refuses, with its words, where gloo (which runs the collectives
    here) would compute. Read in Ascend/pytorch (torch_npu/csrc/distributed/ProcessGroupHCCL.cpp,
    HCCLUtils.cpp; master and the v2.1.0 ... v2.12.0 branches) and in the strings of libtorch_npu.so of the
    PyPI wheels 2.1.0.post17 ... 2.14.0 (tests/vendors/README.md, "Collectives"):

    * all_reduce / reduce (and their coalesced forms) cast bool and uint8 to int32 first and copy the result
      back; then ``checkSupportedDataType``: int8/16/32/64, fp16, fp32, bf16, else
      ``HCCL <function>: Unsupported data type <at::kDouble>`` (fp64/uint64 only on Ascend950, not
      simulated); reduce_scatter, _reduce_scatter_base and reduce_scatter_tensor_coalesced check without the
      cast (uint8/bool: ``at::kByte/at::kBool``); a dtype outside HCCL's map: ``Unsupported data type for
      HCCL process group``;
    * ``getHcclReduceOp``, after the dtype: ``Cannot use ReduceOp.BAND with HCCL`` (BOR, BXOR); AVG is a SUM,
      then ``tensor.div_(size)`` in place (an integer tensor fails in torch's true division); PREMUL_SUM
      (torch_npu from 2.7, read in the wheels' strings; the Ascend/pytorch branches v2.6.0 onwards since commit
      7b4bb7e59 of March 2026): the input multiplied in place by the factor before anything is checked (the
      pre-hook), then a SUM; before 2.7 ``Unhandled ReduceOp`` (ErrCode::NOT_FOUND), after the dtype check;
    * gather: ``ProcessGroupHCCL does not support gather`` (outside the 910B "compatible mode"); torch_npu
      replaces ``dist.gather`` by an all_gather (`patch_gather`); ``recvAnysource``: ``ProcessGroupHCCL does
      not support recv``;
    * all_to_all_single of 0-dim tensors: ``Scalar tensors (0-dim tensors) are not supported in alltoall.
      ...`` in the 2.7.1 and the 2.10.0-2.14.0 wheels (and master), not in 2.1-2.6, 2.8, 2.9.

    Each message ends with torch_npu's ``DIST_ERROR(ErrCode::...)`` suffix (`dist_error`).
    """

    #: HCCLUtils.cpp: kScalarTypeToHcclDataType, then kHcclDataTypeToStringMap (the names its errors print).
    NAMES = {"uint8": "at::kByte/at::kBool", "bool": "at::kByte/at::kBool", "int8": "at::kChar",
             "int16": "at::kShort", "int32": "at::kInt", "int64": "at::kLong", "float16": "at::kHalf",
             "float32": "at::kFloat", "float64": "at::kDouble", "bfloat16": "at::kBFloat16",
             "uint16": "at::ScalarType::UInt16", "uint32": "at::ScalarType::UInt32",
             "uint64": "at::ScalarType::UInt64", "float8_e4m3fn": "at::ScalarType::Float8_e4m3fn",
             "float8_e5m2": "at::ScalarType::Float8_e5m2"}
    #: checkSupportedDataType's set (outside Ascend950).
    REDUCED = frozenset({"int8", "int16", "int32", "int64", "float16", "float32", "bfloat16"})
    #: The functions that reduce bool and uint8 as int32 (the others refuse them).
    CASTS = frozenset({"allreduce", "allreduce_coalesced", "reduce"})
    #: NPUException.cpp: ErrCode -> (number, text)
    NOT_SUPPORT = (7, "feature not supported")
    NOT_FOUND = (8, "resource not found")

    @staticmethod
    def dist_error(code=NOT_SUPPORT) -> str:
        """torch_npu's DIST_ERROR(code): NPUException.cpp's formatErrorCode for the DIST submodule (2), the
        stand-in's one formatter of that suffix (csrc/strict.cpp error_code, which its aclnn refusals use too)."""
        return torch.ops.sim_accel_strict.error_code(2, "DIST", code[0], code[1])

    def prepare(self, function, tensors, op):
        factor = _premul_factor(op)
        if factor is not None and _torch_release() >= (2, 7):
            for t in tensors:  # the pre-hook, on the tensors themselves (an integer tensor fails in torch here)
                t.mul_(factor)
        for t in tensors:
            name = str(t.dtype).replace("torch.", "")
            if function in self.CASTS and name in ("bool", "uint8"):
                name = "int32"  # reduced as int32 (the cast runs before the check)
            if name not in self.NAMES:
                raise RuntimeError("Unsupported data type for HCCL process group" + self.dist_error())
            if name not in self.REDUCED:
                raise RuntimeError(f"HCCL {function}: Unsupported data type {self.NAMES[name]}" + self.dist_error())
        if factor is not None:
            if _torch_release() < (2, 7):
                raise RuntimeError("Unhandled ReduceOp" + self.dist_error(self.NOT_FOUND))
            return dist.ReduceOp.SUM
        label = _bitwise(op)
        if label is not None:
            raise RuntimeError(f"Cannot use ReduceOp.{label} with HCCL" + self.dist_error())
        return op

    def cast(self, function, views):
        if function not in self.CASTS:
            return views
        return [v.to(torch.int32) if v.dtype in (torch.bool, torch.uint8) else v for v in views]

    def average(self, views, size):
        for v in views:
            v.div_(size)  # as torch_npu: true division in place (integer tensors fail in torch)

    def gather(self):
        raise RuntimeError("ProcessGroupHCCL does not support gather" + self.dist_error())

    def recv_anysource(self):
        raise RuntimeError("ProcessGroupHCCL does not support recv" + self.dist_error())

    def allgather_coalesced(self):
        # ProcessGroupHCCL has no allgather_coalesced: c10d::Backend's own refusal
        raise RuntimeError("Backend hccl does not support allgather_coalesced")

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes):
        release = _torch_release()
        if output_split_sizes or input_split_sizes or not (release >= (2, 10) or release[:2] == (2, 7)):
            return
        if input.dim() < 1 or output.dim() < 1:
            raise RuntimeError(
                "Scalar tensors (0-dim tensors) are not supported in alltoall. "
                f"inputTensor.dim()={input.dim()}, outputTensor.dim()={output.dim()}. "
                "Please reshape tensors to at least 1-D before calling alltoall." + self.dist_error())


class EcclRules(Rules):
    """What torch_gcu's ProcessGroupECCL does, read in the only public source of it: torch_gcu v2.10.0
    (github.com/sunnygui-L/torch-gcu@e63ff28, torch_gcu/csrc/distributed/ProcessGroupECCL.cpp, ECCLUtils.hpp;
    quoted in tests/vendors/eccl_excerpts.txt; not an Enflame account: evidence, not the vendor's word):

    * every reduction (allreduce and its coalesced form, reduce, reduce_scatter, _reduce_scatter_base,
      reduce_scatter_tensor_coalesced) takes its ECCL type from ``ecclDataType``: int8, uint8, int32, fp16, fp32,
      bf16, bool (as uint8), and ``{at::kDouble, ecclFloat32}`` / ``{at::kLong, ecclInt32}`` ("GCU do not support
      64-bit"): float64 and int64 are reduced as float32 and int32, with no word (torch_gcu stores them so on
      the device: its "narrow" types; the stand-in keeps 64-bit storage and narrows in the reduction only);
      another dtype: ``Input tensor data type is not supported for ECCL process group: <ScalarType>``;
    * ``getEcclReduceOp``, after the dtype: a bool SUM is a MAX; ``Cannot use ReduceOp.AVG with boolean
      inputs``; PREMUL_SUM only with ECCL >= 3.5.1 (``ENABLE_ECCL_PREMUL_SUM_SUPPORT``), else ``ECCL not supprt
      PreMulSum``: which ECCL a release ships is not known, the stand-in refuses; ``Cannot use ReduceOp.BAND
      with ECCL`` (BOR, BXOR); AVG is ecclAvg (NCCL's: integers truncate);
    * ``recvAnysource`` and ``allgather_coalesced``: NotImplementedError ``ProcessGroupECCL does not support
      recvAnysource`` / ``... allgather_coalesced``; gather and scatter are implemented.
    """

    #: ecclDataType's keys (torch's names) -> the dtype eccl reduces them in
    REDUCES_AS = {"int8": torch.int8, "uint8": torch.uint8, "float32": torch.float32, "float64": torch.float32,
                  "int32": torch.int32, "int64": torch.int32, "float16": torch.float16, "bool": torch.bool,
                  "bfloat16": torch.bfloat16}
    #: c10's ScalarType names (what TORCH_CHECK prints) of dtypes outside the map
    SCALAR_NAMES = {"int16": "Short", "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64",
                    "complex32": "ComplexHalf", "complex64": "ComplexFloat", "complex128": "ComplexDouble",
                    "float8_e5m2": "Float8_e5m2", "float8_e4m3fn": "Float8_e4m3fn",
                    "float8_e5m2fnuz": "Float8_e5m2fnuz", "float8_e4m3fnuz": "Float8_e4m3fnuz"}

    def prepare(self, function, tensors, op):
        for t in tensors:
            name = str(t.dtype).replace("torch.", "")
            if name not in self.REDUCES_AS:
                raise RuntimeError("Input tensor data type is not supported for ECCL process group: "
                                   + self.SCALAR_NAMES.get(name, name))
        if any(t.dtype == torch.bool for t in tensors) and op == dist.ReduceOp.AVG:
            raise RuntimeError("Cannot use ReduceOp.AVG with boolean inputs")
        if _premul_factor(op) is not None:
            raise RuntimeError("ECCL not supprt PreMulSum")
        label = _bitwise(op)
        if label is not None:
            raise RuntimeError(f"Cannot use ReduceOp.{label} with ECCL")
        return op

    def cast(self, function, views):
        return [v.to(self.REDUCES_AS[str(v.dtype).replace("torch.", "")]) for v in views]

    def recv_anysource(self):
        raise NotImplementedError("ProcessGroupECCL does not support recvAnysource")

    def allgather_coalesced(self):
        raise NotImplementedError("ProcessGroupECCL does not support allgather_coalesced")


#: Backend -> how the real one reduces and what it refuses; tccl: nothing known to differ (`Rules`; the sources
#: read are in tests/vendors/README.md).
STRICT = {"hccl": HcclRules, "eccl": EcclRules}
STRICT.update(_backend_rules.RULES)  # cncl, mccl, bccl


def patch_gather(device: str) -> None:
    """``dist.gather`` as torch_npu has it (``_gather`` of torch_npu/distributed/distributed_c10d.py, put on
    ``torch.distributed.gather`` and ``distributed_c10d.gather`` at import, every release from 2.1): for
    device tensors an all_gather on the group's backend, after the destination's sizes are broadcast, with a
    warning on the destination; other tensors take the group's own gather. gather_object reaches it through
    the module's ``gather``."""
    import warnings

    import torch.distributed.distributed_c10d as c10d

    def _gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
        c10d._check_single_tensor(tensor, "tensor")
        if gather_list:
            c10d._check_tensor_list(gather_list, "gather_list")
        else:
            gather_list = []
        c10d._ensure_all_tensors_same_dtype(tensor, gather_list)
        if c10d._rank_not_in_group(group):
            c10d._warn_not_in_group("gather")
            return None
        my_rank = c10d.get_rank()
        c10d._validate_output_list_for_rank(my_rank, dst, gather_list)
        group_size = c10d._get_group_size(group)
        recv_size_list = [None] * group_size if my_rank != dst else [t.size() for t in gather_list]
        opts = dist.GatherOptions()
        opts.rootRank = dst
        pg = c10d._get_default_group() if group is None or group is c10d.GroupMember.WORLD else group
        if tensor.device.type == device:
            if my_rank == dst:
                warnings.warn("HCCL doesn't support gather at the moment. Implemented with allgather instead.")
            # To handle tensors of different shape on each rank, update recv shape first.
            dist.broadcast_object_list(recv_size_list, dst, group)
            if not gather_list:
                gather_list = [torch.empty(size, dtype=tensor.dtype).to(device) for size in recv_size_list]
            work = pg._get_backend(torch.device(device)).allgather([gather_list], [tensor])
        else:
            if pg is not c10d._get_default_group():
                opts.rootRank = c10d.get_group_rank(pg, dst)
            work = pg.gather([gather_list] if dst == my_rank else [], [tensor], opts)
        if async_op:
            return work
        work.wait()
        return None

    def _gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None, **weights):
        # torch_npu's _gather_object: torch's algorithm, with _gather (torch's gather_object would call the
        # module's gather with group_dst=, which _gather does not take). dst: global rank; group_dst: on group.
        if dst is None and group_dst is None:
            dst = 0
        elif dst is not None and group_dst is not None:
            raise ValueError("Cannot specify both dst and group_dst: dst is the destination rank on the global "
                             "process group, group_dst is the destination rank on `group`.")
        elif group_dst is not None:
            dst = c10d.get_global_rank(group or c10d._get_default_group(), group_dst)
        if c10d._rank_not_in_group(group):
            c10d._warn_not_in_group("gather_object")
            return
        my_rank = c10d.get_rank()
        c10d._validate_output_list_for_rank(my_rank, dst, object_gather_list)
        device = (c10d._get_object_coll_device if hasattr(c10d, "_get_object_coll_device")
                  else c10d._get_pg_default_device)(group)
        input_tensor, local_size = _call_with(c10d._object_to_tensor, obj, device, group=group, **weights)
        group_size = c10d.get_world_size(group=group)
        object_sizes_tensor = torch.zeros(group_size, dtype=torch.long, device=device)
        object_size_list = [object_sizes_tensor[i].unsqueeze(dim=0) for i in range(group_size)]
        dist.all_gather(object_size_list, local_size, group=group)
        max_object_size = int(max(object_size_list).item())
        input_tensor.resize_(max_object_size)
        output_tensors = None
        if my_rank == dst:
            coalesced = torch.empty(max_object_size * group_size, dtype=torch.uint8, device=device)
            output_tensors = [coalesced[max_object_size * i: max_object_size * (i + 1)] for i in range(group_size)]
        _gather(input_tensor, gather_list=output_tensors, dst=dst, group=group)
        if my_rank != dst:
            return
        for i, tensor in enumerate(output_tensors):
            object_gather_list[i] = _call_with(c10d._tensor_to_object, tensor.type(torch.uint8), object_size_list[i],
                                               group=group, **weights)

    for function, name in ((_gather, "_gather"), (_gather_object, "_gather_object")):
        function.__name__ = function.__qualname__ = name
        function.__module__ = "torch_npu.distributed.distributed_c10d"
    dist.gather = c10d.gather = _gather
    dist.gather_object = c10d.gather_object = _gather_object


def _call_with(function, *args, **optional):
    """`function(*args, **those of `optional` it takes)`: torch's private helpers gained parameters over
    releases (_object_to_tensor's group in 2.3, weights_only in 2.14)."""
    import inspect

    taken = inspect.signature(function).parameters
    return function(*args, **{k: v for k, v in optional.items() if k in taken})


def register_backend(spec, C, physical) -> None:
    """Register ``spec.backend`` for device type ``spec.name``.

    `physical` maps local device indices to physical ids (the visible-devices
    variable): tccl's one-process-per-device rule is about physical devices.
    """

    def backend(store, rank, size, timeout):
        return C.SimBackend(rank, size, spec.backend, SimCollectives(spec, C, store, rank, size, timeout, physical))

    if spec.extended_api:

        def creator(dist_backend_opts, pg_options):
            o = dist_backend_opts
            return backend(o.store, o.group_rank, o.group_size, o.timeout)

    else:

        def creator(store, rank, size, timeout):
            return backend(store, rank, size, timeout)

    if spec.builtin:
        return _builtin_backend(spec, backend)
    if spec.backend == "hccl":
        patch_gather(spec.name)
    creator.__name__ = f"_new_process_group_{spec.backend}_helper"
    dist.Backend.register_backend(
        spec.backend, creator, extended_api=spec.extended_api, devices=[spec.name]
    )


def _builtin_backend(spec, backend) -> None:
    """torch's own backend of a built-in device (xccl): torch's code path for it runs, with the stand-in's backend
    where torch built with XPU has ``torch._C._distributed_c10d.ProcessGroupXCCL``. torch 2.8-2.14 construct it in
    ``_new_process_group_helper`` (``ProcessGroupXCCL(store, rank, size, options)`` once ``is_xccl_available()``),
    torch 2.15 in ``_create_xccl_process_group``, the creator its ``torch.distributed.backends`` entry point
    registers; both read these two module globals."""
    import torch.distributed.distributed_c10d as c10d

    name = f"ProcessGroup{spec.backend.upper()}"

    class Options:  # the fields torch sets on ProcessGroupXCCL.Options
        def __init__(self):
            self.global_ranks_in_group, self.group_name, self._timeout, self.enable_reconfigure = [], "", None, False

    def __new__(cls, store, rank, size, options=None):
        timeout = getattr(options, "_timeout", None) or datetime.timedelta(minutes=30)
        return backend(store, rank, size, timeout)

    process_group = type(name, (), {"__new__": __new__, "Options": Options, "__module__": c10d.__name__})
    setattr(c10d, name, process_group)
    setattr(c10d, f"_{spec.backend.upper()}_AVAILABLE", True)

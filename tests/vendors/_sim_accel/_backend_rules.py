"""What the NCCL-derived backends of torch_mlu (cncl), torch_musa (mccl) and torch_supa (bccl) refuse, where gloo
(which runs every collective here) would compute; each read in the plug-in's own source (tests/vendors/README.md,
"Collectives of the stand-ins"). hccl's rules, with torch_npu's error suffixes, are `_distributed.HcclRules`; the
interface is `Rules`'s, below (`SimCollectives` calls ``prepare``, ``cast``, ``average``, ``gather``,
``recv_anysource``, ``allgather_coalesced`` and ``alltoall_base``).

* dtypes: each backend's ScalarType map; a dtype outside it raises the backend's message. Complex tensors reduce as
  their real view (SUM/AVG), as NCCL's process group does; their other ops are not checked here.
* ReduceOp.BAND / BOR / BXOR: refused by all three (cncl and bccl with NCCL's sentence under their own name, mccl
  with "Unexpected ReduceOp"); ReduceOp.AVG of bool tensors: refused.
* ReduceOp.AVG: mccl (mcclAvg) and bccl (bcclAvg) average as NCCL's ncclAvg does (integers truncate); cncl
  (torch_mlu's r2.4_develop branch: ``procReduceOutput``) sums integer tensors and floor-divides them.

Not simulated: cncl maps float64 to cnclFloat because torch_mlu keeps 64-bit data as 32-bit on the device (the
stand-ins store float64 at full precision); torch_mlu's older branches (r1.22_*) refuse AVG altogether; how c10d
prints a ReduceOp in mccl's "Unexpected ReduceOp: <op>" (written here with the op's name).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

#: c10's names of the ScalarTypes (what a ``<< type`` in the plug-ins' messages prints).
#: (torch.uint16/32/64 exist from torch 2.3)
_C10 = {getattr(torch, name): c10 for name, c10 in (("int16", "Short"), ("uint16", "UInt16"), ("uint32", "UInt32"),
                                                     ("uint64", "UInt64"), ("float64", "Double"),
                                                     ("complex32", "ComplexHalf")) if hasattr(torch, name)}


class Rules:
    """How a vendor backend reduces where it is not NCCL, and what it refuses: the hooks `SimCollectives` calls.
    This base is what is known of a backend with no source (tccl): it reduces every dtype gloo does, with every op
    (bitwise ones too), and averages as NCCL's ncclAvg (floats divided, integers truncated)."""

    def __init__(self, C):
        self._C = C

    def prepare(self, function, tensors, op):
        """Before reducing `tensors` in `function` (the C++ name: allreduce, _reduce_scatter_base, ...) with
        `op`: raise what the backend refuses, do what it does first; return the op gloo reduces with."""
        return op

    def cast(self, function, views):
        """The tensors the backend reduces, in the dtypes it reduces in (the result is copied back)."""
        return views

    def average(self, views, size):
        for v in views:
            if v.is_floating_point() or v.is_complex():
                v.div_(size)
            else:
                v.copy_(torch.div(v, size, rounding_mode="trunc"))

    def gather(self):
        pass

    def recv_anysource(self):
        pass

    def allgather_coalesced(self):
        pass

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes):
        pass


def _bitwise(op):
    """'BAND' / 'BOR' / 'BXOR' for a bitwise ReduceOp, else None."""
    for value, label in ((dist.ReduceOp.BAND, "BAND"), (dist.ReduceOp.BOR, "BOR"), (dist.ReduceOp.BXOR, "BXOR")):
        if op == value:
            return label
    return None


class _NcclDerived(Rules):
    """The shared shape of the three; subclasses set the names, the dtype map and the messages."""

    #: the dtypes of the backend's ScalarType map (complex: checked as their real view)
    DTYPES: frozenset = frozenset({torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32,
                                   torch.float64, torch.bool, torch.bfloat16})

    def dtype_error(self, dtype) -> Exception:
        raise NotImplementedError

    def op_error(self, label: str) -> Exception:
        raise NotImplementedError

    def bool_avg_error(self) -> Exception:
        return TypeError("Cannot use ReduceOp.AVG with boolean inputs")

    def prepare(self, function, tensors, op):
        for t in tensors:
            dtype = t.real.dtype if t.is_complex() else t.dtype
            if dtype not in self.DTYPES:
                raise self.dtype_error(dtype)
        if op == dist.ReduceOp.AVG and any(t.dtype == torch.bool for t in tensors):
            raise self.bool_avg_error()
        label = _bitwise(op)
        if label is not None:
            raise self.op_error(label)
        return op


class CnclRules(_NcclDerived):
    """torch_mlu's process_group_cncl.cpp (Cambricon/torch_mlu r2.4_develop, 9e95f97): ``cncl_data_type`` (no int16,
    no float8), ``getCnclDataType``, ``getCnclReduceOp`` (C10_THROW_ERROR ValueError / TypeError), and
    ``procReduceOutput``: an integer AVG is a SUM, then ``floor_divide_(world_size)``."""

    def dtype_error(self, dtype):
        return RuntimeError("Unsupported data type for CNCL process group")

    def op_error(self, label):
        return ValueError(f"Cannot use ReduceOp.{label} with CNCL")

    @staticmethod
    def average(views, size):
        for v in views:
            if v.is_floating_point() or v.is_complex():
                v.div_(size)
            else:
                v.copy_(torch.div(v, size, rounding_mode="floor"))


class McclRules(_NcclDerived):
    """torch_musa's ProcessGroupMCCL.cpp (MooreThreads/torch_musa main, 8b583b3): ``mcclDataType`` (NCCL's; float8
    only where MCCL is built with it: not here), ``getMcclDataType`` and ``getMcclReduceOp`` (TORCH_CHECK:
    RuntimeError), ``recvAnysource``: "ProcessGroupMCCL does not support recvAnysource"."""

    def dtype_error(self, dtype):
        return RuntimeError(f"Input tensor data type in not supported for MCCL process group: "
                            f"{_C10.get(dtype, str(dtype).replace('torch.', ''))}")

    def op_error(self, label):
        return RuntimeError(f"Unexpected ReduceOp: {label}")

    def bool_avg_error(self):
        return RuntimeError("Cannot use ReduceOp.AVG with Boolean inputs")

    def recv_anysource(self):
        raise RuntimeError("ProcessGroupMCCL does not support recvAnysource")


class BcclRules(_NcclDerived):
    """torch_supa's ProcessGroupBCCL.cpp and BCCLUtils.hpp (BIRENSUPA/torch-supa, 68fb624): ``bcclDataType`` (NCCL's
    map), ``getBcclDataType`` (TypeError), ``getBcclReduceOp`` (ValueError, NCCL's sentences with BCCL)."""

    def dtype_error(self, dtype):
        return TypeError(f"Input tensor data type is not supported for BCCL process group: "
                         f"{_C10.get(dtype, str(dtype).replace('torch.', ''))}")

    def op_error(self, label):
        return ValueError(f"Cannot use ReduceOp.{label} with BCCL")


#: backend -> its rules, merged into `_distributed.STRICT`.
RULES = {"cncl": CnclRules, "mccl": McclRules, "bccl": BcclRules}

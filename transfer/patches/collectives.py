"""Collectives the target's backend refuses: computed as NCCL computes them, or refused as NCCL refuses them.

A CUDA script reduces over NCCL. Where the target's backend refuses a dtype or an operation NCCL accepts, or
computes it otherwise (`Profile.collectives`, read in the plug-in's source: hccl reduces no float64, its
reduce_scatter no uint8/bool, its AVG fails on integer tensors; eccl reduces float64 as float32 and int64 as
int32), the call is computed exactly as NCCL would: every rank's tensor is all-gathered over the same group (in
its own dtype, complex as pairs of reals: every backend gathers what NCCL reduces) and reduced on the host in the
tensor's dtype, in rank order, each rank getting the same result: NCCL's float64 SUM is a float64 sum, its AVG of
floating tensors a sum of each input times 1/world (ncclAvg's pre-multiplied sum), of integer tensors a sum
divided with truncation; integer sums wrap in their dtype as NCCL's do. It costs world times the data on the
wire: right for metrics, slow for large tensors. Said once per collective and dtype (a warning with the user's
line; `status()`'s substitutions).

ReduceOp.PREMUL_SUM (``dist._make_nccl_premul_sum(f)``, FSDP2's gradient divide factor): NCCL multiplies each
input by f, then sums. transfer does the same on every target (the factor is read from the op's pickled state):
the input times f, reduced with SUM by the backend (gloo and older plug-ins have no PREMUL_SUM), or on the host
where the backend refuses the dtype; NCCL's refusal for integer tensors.

Where a collective is issued matters little: the functions of torch.distributed are replaced here (both homes,
the hot path a plain function); DistributedDataParallel's reducer, which reduces gradients from C++, gets a comm
hook computing the buckets of a refused dtype (a float64 model's gradients) when the model has such parameters,
and the script's own comm hook, registered later, runs inside it; the functional collectives
(torch.distributed._functional_collectives: DTensor, tensor parallelism, compiled graphs) get kernels for the
target's device key on their reduction operators, handing everything the backend computes to torch's own kernel.
Inside ``_coalescing_manager`` a collective the backend refuses cannot be computed (the all_gather would be
queued with it): a clear error names the reason and the fix.

On torch 2.0's gloo (the cpu target), which reduces and moves no bool tensors, bool reductions are computed as
above and the collectives that move tensors (broadcast, all_gather, send, recv, scatter, ...) move a bool
tensor's bytes, as NCCL does (``collectives.bool``).

What NCCL refuses stays refused, with NCCL's words and type, not the vendor's: ReduceOp.BAND/BOR/BXOR
("Cannot use ReduceOp.BAND with NCCL"), AVG of bool tensors, PREMUL_SUM of integer tensors, `recv` without a
source ("ProcessGroupNCCL does not support recvAnysource"), each error naming what transfer did and the fix.

The hot path (a dtype and an op the backend reduces) is a plain Python function: a set lookup and an identity
check on top of torch's call, about 0.5 us (benchmarks/calls.py: dist.all_reduce).
"""

from __future__ import annotations

import functools
import inspect
import logging

import torch

from ..frames import caller_site
from ..profiles import NCCL_REDUCES
from . import torch_release

logger = logging.getLogger("transfer")

#: What NCCL reduces (profiles.NCCL_REDUCES): the dtypes computed here when the backend refuses them.
_NCCL_REDUCES = frozenset(getattr(torch, name) for name in NCCL_REDUCES)
#: What NCCL's PREMUL_SUM takes ("PreMulSum Data type must be half, float, bfloat16 or double"; complex: its view).
_PREMUL_DTYPES = frozenset({torch.float16, torch.float32, torch.bfloat16, torch.float64, torch.complex64,
                            torch.complex128})
#: The collectives handled: name -> (the parameter holding the reduced tensor(s), the kind of reduction).
_REDUCTIONS = {
    "all_reduce": ("tensor", "reduce"),
    "all_reduce_coalesced": ("tensors", "reduce"),
    "reduce": ("tensor", "reduce"),
    "reduce_scatter_tensor": ("input", "reduce_scatter"),
    "reduce_scatter": ("input_list", "reduce_scatter"),
}
#: The collectives that move tensors without reducing them (recv/irecv apart: `_Rules.receive` wraps them too).
_MOVES = ("broadcast", "all_gather", "gather", "scatter", "send", "isend", "all_to_all", "all_to_all_single")
#: The functional collectives' reduction operators (torch >= 2.3: _c10d_functional): name -> (the kind, whether
#: the first argument is a list, whether it is reduced in place).
_FUNCTIONAL = {
    "all_reduce": ("reduce", False, False),
    "all_reduce_": ("reduce", False, True),
    "all_reduce_coalesced": ("reduce", True, False),
    "all_reduce_coalesced_": ("reduce", True, True),
    "reduce_scatter_tensor": ("reduce_scatter", False, False),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", True, False),
}


def apply(ctx) -> None:
    limits = ctx.profile.collectives
    import torch.distributed as dist

    if limits is None or not dist.is_available():
        return
    import torch.distributed.distributed_c10d as c10d

    rules = _Rules(ctx, limits)
    reg = ctx.registry
    as_bytes = _bool_as_bytes if rules.bool_as_bytes and reg.enabled("collectives.bool") else (lambda f: f)
    for owner in (c10d, dist):  # both homes: libraries call either
        suffix = "" if owner is dist else ".c10d"
        for name in _REDUCTIONS:
            if hasattr(owner, name):  # a plain function: the hot path (a wrapt wrapper cost ~2 us a call here)
                reg.replace(f"collectives.{name}{suffix}", owner, name, rules.reduction(name, getattr(owner, name)))
        for name in ("recv", "irecv"):
            reg.replace(f"collectives.{name}{suffix}", owner, name, rules.receive(as_bytes(getattr(owner, name))))
        if as_bytes is _bool_as_bytes:
            for name in _MOVES:
                if hasattr(owner, name):
                    reg.replace(f"collectives.bool.{name}{suffix}", owner, name, as_bytes(getattr(owner, name)))
    if reg.enabled("collectives.ddp"):
        _ddp(ctx, rules)
    if reg.enabled("collectives.functional"):
        _functional(ctx, rules)


class _Rules:
    """The decisions, for one target: which calls go through, which are computed here, which are refused."""

    def __init__(self, ctx, limits):
        import torch.distributed as dist

        self.ctx = ctx
        self.dist = dist
        self.device_type = ctx.profile.device_type
        self.backend = ctx.profile.backend
        self.limits = limits
        dtypes = lambda names: frozenset(getattr(torch, n) for n in names)  # noqa: E731
        self.ok = {"reduce": dtypes(limits.reduce_dtypes), "reduce_scatter": dtypes(limits.reduce_scatter_dtypes)}
        op = dist.ReduceOp
        self.sum, self.avg, self.premul = op.SUM, op.AVG, op.PREMUL_SUM
        self.computable = (op.SUM, op.PRODUCT, op.MIN, op.MAX, op.AVG, op.PREMUL_SUM)
        self.bitwise = ((op.BAND, "BAND"), (op.BOR, "BOR"), (op.BXOR, "BXOR"))
        self.said = set()
        # gloo's AVG of floating tensors: refused before torch 2.8 ("Cannot use ReduceOp.AVG with Gloo"; added by
        # pytorch#149781), then divided by the element count instead of the ranks (pytorch#162338, fixed by
        # pytorch#171458 in 2026-01): computed here as NCCL does (all_gather, host) on torch < 2.12
        # torch 2.1's gloo also has no _reduce_scatter_base (reduce_scatter computed from an all_gather, as NCCL
        # does) and no _allgather_base (that all_gather takes the list form)
        # torch 2.0's gloo reduces no bool tensors ("Invalid scalar type"): NCCL's logical or/and, computed here
        # nor moves them: broadcast, all_gather, send, ... move their bytes (_bool_as_bytes), as NCCL moves them
        release = torch_release()
        self.old_gloo = self.backend == "gloo" and release < (2, 12)
        self.float_avg = not self.old_gloo
        self.bool_as_bytes = self.old_gloo and release < (2, 1)
        if self.old_gloo:
            self.ok["reduce_scatter"] = frozenset()
            if self.bool_as_bytes:
                self.ok["reduce"] = self.ok["reduce"] - {torch.bool}

    # ------------------------------------------------------------------ the wrappers
    def reduction(self, name, function):
        """`function` (torch's all_reduce, reduce, ...) under these rules. The hot path, a dtype and an op the
        backend reduces, costs a few attribute reads; everything else takes `_slow`."""
        tensor_param, kind = _REDUCTIONS[name]
        signature = inspect.signature(function)
        parameters = list(signature.parameters)
        tensor_at, op_at = parameters.index(tensor_param), parameters.index("op")
        ok, sum_op, computes, slow = self.ok[kind], self.sum, self._backend_computes, self._slow

        def collective(*args, **kwargs):
            tensor = args[tensor_at] if len(args) > tensor_at else kwargs.get(tensor_param)
            op = args[op_at] if len(args) > op_at else kwargs.get("op", sum_op)
            dtype = getattr(tensor, "dtype", None)
            if dtype in ok and (op is sum_op or computes(op, dtype)):
                return function(*args, **kwargs)  # the hot path: what the backend computes itself
            return slow(name, kind, function, _bind(signature, args, kwargs), args, kwargs)

        return collective

    def receive(self, function):
        """`function` (recv, irecv): without a source, NCCL's refusal on the target's NCCL groups."""
        signature = inspect.signature(function)

        def receive(*args, **kwargs):
            if len(args) > 1 or kwargs.get("src") is not None:
                return function(*args, **kwargs)
            bound = _bind(signature, args, kwargs)
            tensor = bound.get("tensor")
            if bound.get("src") is None and bound.get("group_src") is None and isinstance(tensor, torch.Tensor) \
                    and tensor.device.type == self.device_type and self._on_backend(bound.get("group")):
                raise NotImplementedError(
                    f"ProcessGroupNCCL does not support recvAnysource (transfer: {function.__name__}() without src= "
                    f"receives from any rank, which NCCL refuses on CUDA, so the script fails here as there: pass "
                    f"src=<the sending rank>)")
            return function(*args, **kwargs)

        return receive

    # ------------------------------------------------------------------ the decisions
    def _backend_computes(self, op, dtype) -> bool:
        """Whether the backend computes `op` on `dtype` (one it reduces) as NCCL does."""
        if op == self.avg:
            return (self.float_avg if dtype.is_floating_point or dtype.is_complex else self.limits.integer_avg)
        return op != self.premul and self._bitwise(op) is None

    def _bitwise(self, op):
        return next((name for value, name in self.bitwise if op == value), None)

    def _decide(self, name, kind, tensors, op, group):
        """None: the backend computes it as NCCL does (or NCCL would refuse it too: the backend's own words);
        else how it is computed here: "premultiply" (PREMUL_SUM on a dtype the backend reduces) or "host".
        Raises NCCL's refusals."""
        if not tensors or not all(isinstance(t, torch.Tensor) and t.device.type == self.device_type for t in tensors) \
                or not self._on_backend(group) or _not_member(self.dist, group):
            return None
        bitwise = self._bitwise(op)
        if bitwise is not None:
            raise _nccl_error(ValueError, RuntimeError, f"Cannot use ReduceOp.{bitwise} with NCCL",
                              f"{name}: NCCL has no bitwise reductions, so the script fails here as on CUDA; "
                              f"reduce 0/1 values with ReduceOp.MIN (and) or MAX (or) instead")
        dtype = tensors[0].dtype
        if op == self.avg and dtype == torch.bool:
            raise _nccl_error(RuntimeError, TypeError, "Cannot use ReduceOp.AVG with boolean inputs",
                              f"{name}: as on CUDA")
        premul = op == self.premul
        if premul and dtype not in _PREMUL_DTYPES:
            raise _nccl_error(TypeError, RuntimeError, "PreMulSum Data type must be half, float, bfloat16 or double",
                              f"{name} with ReduceOp.PREMUL_SUM of {_name(dtype)} tensors: as on CUDA")
        if dtype not in _NCCL_REDUCES or not any(op == computable for computable in self.computable):
            return None
        if dtype in self.ok[kind] and (premul or self._backend_computes(op, dtype)):
            return "premultiply" if premul else None
        if self._group(group) in getattr(self.dist.distributed_c10d._world, "pg_coalesce_state", {}):  # [] at first
            from ..errors import TransferError

            raise TransferError(
                f"transfer: {name} of {_name(dtype)} tensors inside _coalescing_manager: {self.backend} does not "
                f"reduce it as NCCL does ({self.limits.source}), and transfer computes it with an all_gather that "
                f"cannot run inside the coalesced block. Issue this {name} outside the block, or reduce a dtype "
                f"{self.backend} reduces (float32)")
        return "host"

    def _slow(self, name, kind, wrapped, bound, args, kwargs):
        """Lists of tensors, other ops, dtypes the backend refuses: the decisions of the module docstring."""
        tensors = bound[_REDUCTIONS[name][0]]
        tensors = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
        group = bound.get("group")
        op = bound.get("op", self.sum)
        how = self._decide(name, kind, tensors, op, group)
        if how is None:
            return wrapped(*args, **kwargs)
        if how == "premultiply":
            return self._premultiplied(name, wrapped, bound, _premul_factor(op))
        dtype = tensors[0].dtype
        self._say(name, dtype, op == self.avg and dtype in self.ok[kind])
        output = bound.get("output")
        self._compute(name, tensors, op, group, output, name != "reduce" or _is_destination(self.dist, bound, group))
        return _completed(tensors) if bound.get("async_op") else None

    def _premultiplied(self, name, wrapped, bound, factor):
        """PREMUL_SUM as NCCL computes it: each input times the factor, then a SUM by the backend. In place where the
        input is the output (all_reduce); otherwise on copies, the script's input left as NCCL leaves it."""
        bound = dict(bound, op=self.sum)
        param = _REDUCTIONS[name][0]
        if name in ("all_reduce", "all_reduce_coalesced"):
            for t in ([bound[param]] if name == "all_reduce" else bound[param]):
                t.mul_(factor)
            return wrapped(**bound)
        if name == "reduce":
            tensor = bound[param]
            bound[param] = scaled = tensor * factor
            work = wrapped(**dict(bound, async_op=False))
            if _is_destination(self.dist, bound, bound.get("group")):
                tensor.copy_(scaled)
            return _completed([tensor]) if bound.get("async_op") else work
        inputs = bound[param]
        bound[param] = [t * factor for t in inputs] if isinstance(inputs, (list, tuple)) else inputs * factor
        return wrapped(**bound)

    def _on_backend(self, group) -> bool:
        """Whether `group` (None: the default group) stands for one of the script's NCCL groups: translated
        from 'nccl' (patches/distributed.py), or, on a vendor, any group of the vendor's backend (DeviceMesh
        and frameworks create groups through torch's own helpers)."""
        dist = self.dist
        try:
            pg = self._group(group)
            if pg in getattr(self.ctx, "nccl_groups", ()):
                return True
            return self.ctx.cpu is None and self.backend in str(dist.get_backend(group))
        except (RuntimeError, ValueError, TypeError):
            return False

    def _group(self, group):
        return group if group is not None else self.dist.distributed_c10d._get_default_group()

    def _say(self, name, dtype, integer_avg, via: str = "", site: str = "") -> None:
        from ..settings import is_rank_zero

        what = f"{name}{via} of {_name(dtype)} tensors" + (" with ReduceOp.AVG" if integer_avg else "")
        if what in self.said:
            return
        self.said.add(what)
        site = site or caller_site()
        why = (f"{self.backend}'s AVG divides integer tensors in place, which torch refuses" if integer_avg
               and not (dtype.is_floating_point or dtype.is_complex)
               else f"{self.backend} on torch {torch.__version__} has no AVG as NCCL's" if integer_avg
               else f"{self.backend} does not reduce {_name(dtype)} in {name} as NCCL does")
        self.ctx.substitutions[what] = (f"an all_gather and the {'average' if integer_avg else 'reduction'} on the "
                                        f"host, as NCCL computes it (first at {site})")
        if is_rank_zero():
            logger.warning(
                "transfer: %s (%s) is computed as NCCL computes it: %s (%s), so the ranks' tensors are all-gathered "
                "over the same group and reduced on the host in their dtype, in rank order (world size times the "
                "data moved; said once)", what, site, why, self.limits.source)

    # ------------------------------------------------------------------ computing it
    def _compute(self, name, tensors, op, group, output=None, destination=True):
        """`name`'s result as NCCL computes it, from every rank's `tensors`, written where NCCL writes it."""
        dist = self.dist
        world = dist.get_world_size(group)
        factor = _premul_factor(op)
        if name.startswith("all_reduce") or name == "reduce":
            for t in tensors:
                result = _reduce(_gather_all(dist, t, world, group, self.old_gloo), op, world, factor)
                if destination:
                    t.copy_(result.view(t.shape))
        else:  # reduce_scatter(_tensor): every rank's input, reduced; this rank's chunk of it
            source = tensors[0] if len(tensors) == 1 else torch.cat([t.reshape(-1) for t in tensors])
            result = _reduce(_gather_all(dist, source, world, group, self.old_gloo), op, world, factor)
            output.copy_(result.view(world, -1)[dist.get_rank(group)].view(output.shape))
        return tensors


def _bool_as_bytes(function):
    """`function` (a collective that moves tensors without reducing them) moving each bool tensor argument, and
    each bool tensor in a list argument, as its bytes (a uint8 view of the same memory): what NCCL moves."""

    def as_bytes(value):
        if isinstance(value, torch.Tensor):
            return value.view(torch.uint8) if value.dtype == torch.bool else value
        if isinstance(value, (list, tuple)) and any(isinstance(t, torch.Tensor) and t.dtype == torch.bool
                                                    for t in value):
            return [as_bytes(t) for t in value]
        return value

    @functools.wraps(function)
    def moves(*args, **kwargs):
        return function(*[as_bytes(a) for a in args], **{k: as_bytes(v) for k, v in kwargs.items()})

    return moves


def _gather_all(dist, tensor, world, group, list_form=False):
    """(world, numel) on the host: every rank's `tensor`, in group-rank order, in `tensor`'s dtype. Gathered in
    that dtype (complex as pairs of reals): every backend all-gathers what NCCL reduces, and a plug-in that stores
    a dtype otherwise on its device (torch_gcu's 64-bit types) moves and copies it as that dtype."""
    if not tensor.is_contiguous():
        raise RuntimeError("Tensors must be contiguous (as NCCL requires)")
    source = torch.view_as_real(tensor) if tensor.is_complex() else tensor
    flat = source.reshape(-1)
    if flat.dtype == torch.bool:  # gathered as its bytes: torch 2.0's gloo moves no bool tensors
        return _gather_all(dist, flat.view(torch.uint8), world, group, list_form).view(torch.bool)
    if list_form:  # older gloo: no _allgather_base
        parts = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(parts, flat, group=group)
        rows = torch.stack(parts).cpu()
    else:
        out = torch.empty(world * flat.numel(), dtype=flat.dtype, device=tensor.device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # 2.13: the old name warns
        gather(out, flat, group=group)
        rows = out.cpu().view(world, -1)
    return torch.view_as_complex(rows.view(world, -1, 2)) if tensor.is_complex() else rows


def _reduce(rows, op, world, factor=None):
    """NCCL's reduction of the ranks' `rows` (world, n), in their dtype, in rank order."""
    from torch.distributed import ReduceOp

    dtype = rows.dtype
    if factor is not None or (op == ReduceOp.AVG and (dtype.is_floating_point or dtype.is_complex)):
        # PREMUL_SUM, and ncclAvg on floating types: a sum of the inputs pre-multiplied by the factor (1/nranks)
        scale = factor if factor is not None else 1.0 / world
        acc = rows[0] * scale
        for r in range(1, world):
            acc += rows[r] * scale
        return acc
    acc = rows[0].clone()
    for r in range(1, world):
        if op in (ReduceOp.SUM, ReduceOp.AVG):
            acc = torch.maximum(acc, rows[r]) if dtype == torch.bool else acc.add_(rows[r])  # NCCL: bool SUM is MAX
        elif op == ReduceOp.PRODUCT:
            acc.mul_(rows[r])
        elif op == ReduceOp.MIN:
            acc = torch.minimum(acc, rows[r])
        else:
            acc = torch.maximum(acc, rows[r])
    if op == ReduceOp.AVG:  # integers: ncclAvg is a sum divided afterwards, truncating
        acc = torch.div(acc, world, rounding_mode="trunc")
    return acc


def _premul_factor(op):
    """The factor of a PREMUL_SUM ReduceOp (torch pickles it: ReduceOp.__getstate__), else None."""
    from torch.distributed import ReduceOp

    if not isinstance(op, ReduceOp) or op != ReduceOp.PREMUL_SUM:
        return None
    factor = op.__getstate__()[1]
    return factor.item() if isinstance(factor, torch.Tensor) else factor


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _is_destination(dist, bound, group) -> bool:
    if bound.get("group_dst") is not None:
        return dist.get_rank(group) == bound["group_dst"]
    return dist.get_rank() == (bound.get("dst") or 0)


def _not_member(dist, group) -> bool:
    return group is not None and group is dist.GroupMember.NON_GROUP_MEMBER


def _bind(signature, args, kwargs) -> dict:
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _completed(result):
    """A Work already completed, for async_op=True callers (they wait on it)."""
    from torch._C._distributed_c10d import _create_work_from_future

    future = torch.futures.Future()
    future.set_result(result)
    return _create_work_from_future(future)


def _nccl_error(before_nccl2, nccl2, message: str, note: str):
    """NCCL's refusal, as the torch in use raises it: torch 2.15's default 'nccl' (nccl2, TORCH_DIST_USE_NCCL2
    not 0) raises with TORCH_CHECK (RuntimeError / TORCH_CHECK_TYPE), the ProcessGroupNCCL before it with
    C10_THROW_ERROR / TORCH_CHECK."""
    import os

    new = torch_release() >= (2, 15) \
        and os.environ.get("TORCH_DIST_USE_NCCL2") != "0"
    return (nccl2 if new else before_nccl2)(f"{message} (transfer: {note})")


# ---------------------------------------------------------------------------------- DDP's reducer
def _ddp(ctx, rules) -> None:
    """DistributedDataParallel reduces its gradient buckets from C++ (the reducer), past the functions above: a
    model with parameters of a dtype the backend refuses gets a comm hook computing those buckets (the others go
    to the backend as the reducer would send them), and the script's own comm hook, registered later, runs inside
    it (DDP takes one hook; its collectives are the functions above)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def register_comm_hook(wrapped, instance, args, kwargs):
        state = getattr(instance, "_transfer_comm_hook", None)
        if state is None or state.script is not None:
            return wrapped(*args, **kwargs)  # none of transfer's, or DDP's own "can only be called once"
        bound = _bind(inspect.signature(wrapped), args, kwargs)
        instance._check_comm_hook(bound["hook"])
        instance.logger._set_comm_hook_name(bound["hook"].__qualname__)
        instance._comm_hooks.append((bound["hook"], bound["state"]))
        state.script = (bound["hook"], bound["state"])
        return None

    def register_builtin_comm_hook(wrapped, instance, args, kwargs):
        state = getattr(instance, "_transfer_comm_hook", None)
        if state is None or state.script is not None:
            return wrapped(*args, **kwargs)
        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        kind = args[0] if args else kwargs["comm_hook_type"]
        instance.logger._set_comm_hook_name(str(kind))
        if kind == dist.BuiltinCommHookType.FP16_COMPRESS:  # the built-in hooks' Python twins
            state.script = (default_hooks.fp16_compress_hook, instance.process_group)
        else:
            state.script = (None, None)  # ALLREDUCE: what the reducer does by default
        return None

    reg = ctx.registry
    ctx.ddp_built.append(lambda ddp: _adopt(rules, ddp))  # patches/ddp.py's constructor wrapper calls it
    reg.wrap("collectives.ddp.register_comm_hook", DDP, "register_comm_hook", register_comm_hook)
    reg.wrap("collectives.ddp.register_builtin_comm_hook", DDP, "_register_builtin_comm_hook",
             register_builtin_comm_hook)


class _DdpHook:
    """The comm hook's state: the group, and the script's own hook once it registers one."""

    def __init__(self, rules, group, site):
        self.rules, self.group, self.script = rules, group, None
        self.site = site  # where the script built the DDP model (the reducer calls the hook from C++)

    def __call__(self, _, bucket):
        hook, state = self.script or (None, None)
        if hook is not None:
            return hook(state, bucket)
        rules, dist = self.rules, self.rules.dist
        tensor = bucket.buffer()
        tensor.mul_(1.0 / dist.get_world_size(self.group))  # as the reducer divides when no hook is registered
        if tensor.dtype in rules.ok["reduce"]:
            return dist.all_reduce(tensor, group=self.group, async_op=True).get_future().then(lambda f: f.value()[0])
        rules._say("all_reduce", tensor.dtype, False, via=" (DistributedDataParallel's gradients)",
                   site=f"the model built at {self.site}")
        rules._compute("all_reduce", [tensor], dist.ReduceOp.SUM, self.group)
        future = torch.futures.Future()
        future.set_result(tensor)
        return future


def _adopt(rules, ddp) -> None:
    """Give `ddp` transfer's comm hook if its gradients include a dtype the backend refuses (module `_ddp`)."""
    import torch.distributed as dist

    if getattr(ddp, "reducer", None) is None or getattr(ddp, "_comm_hooks", None):
        return  # no reducer, or DDP registered its own hook (mixed precision): its collectives are the functions
    dtypes = {p.dtype for p in ddp.module.parameters() if p.requires_grad}
    if not any(d in _NCCL_REDUCES and d not in rules.ok["reduce"] for d in dtypes):
        return
    group = ddp.process_group
    if not rules._on_backend(group):
        return
    state = _DdpHook(rules, group, caller_site())  # the script's DDP(...) line
    hook = _ddp_comm_hook
    dist._register_comm_hook(ddp.reducer, state, hook)
    ddp._transfer_comm_hook = state


def _ddp_comm_hook(state, bucket):
    """transfer's DDP comm hook (`_DdpHook`): a module-level function, as DDP's checks want one."""
    return state(None, bucket)


# ---------------------------------------------------------------------------------- functional collectives
def _functional(ctx, rules) -> None:
    """Kernels for the target's device key on the functional collectives' reduction operators (torch >= 2.3):
    what the backend computes goes to torch's own kernel (CompositeExplicitAutograd) unchanged."""
    ops = getattr(torch.ops, "_c10d_functional", None)
    if ops is None or not hasattr(ops, "all_reduce") or not hasattr(torch._C, "DispatchKey"):
        return  # torch < 2.3: funcol calls the functions above
    key = "CPU" if ctx.cpu is not None else "PrivateUse1"
    library = torch.library.Library("_c10d_functional", "IMPL")
    for name, (kind, listed, in_place) in _FUNCTIONAL.items():
        if hasattr(ops, name):
            library.impl(name, _functional_kernel(rules, getattr(ops, name).default, name, kind, listed, in_place),
                         key)

    def undo() -> None:
        library._destroy() if hasattr(library, "_destroy") else None

    ctx.registry.on_revert("collectives.functional", undo)
    ctx.functional_library = library  # alive as long as transfer is installed


_FUNCTIONAL_OPS = {"sum": "SUM", "avg": "AVG", "product": "PRODUCT", "min": "MIN", "max": "MAX", "band": "BAND",
                   "bor": "BOR", "bxor": "BXOR", "premul_sum": "PREMUL_SUM"}


def _functional_kernel(rules, overload, name, kind, listed, in_place):
    composite = torch._C.DispatchKey.CompositeExplicitAutograd
    ok, computes = rules.ok[kind], rules._backend_computes
    dist = rules.dist

    def kernel(*args):
        first, reduce_op = args[0], args[1]
        if listed:
            dtype = first[0].dtype if len(first) else None
        else:
            dtype = first.dtype
        op = _functional_op(dist, reduce_op)
        if dtype is None or op is None or (dtype in ok and (op == rules.sum or computes(op, dtype))):
            return overload._op_dk(composite, *args)
        group = dist.distributed_c10d._resolve_process_group(args[-1])
        tensors = list(first) if listed else [first]
        how = rules._decide(name, kind, tensors, op, group)
        if how is None or how == "premultiply":
            scaled = [t * _premul_factor(op) if how else t for t in tensors]
            if how and in_place:
                for t, s in zip(tensors, scaled):
                    t.copy_(s)
                scaled = tensors
            args = ((scaled if listed else scaled[0]), "sum" if how else args[1]) + tuple(args[2:])
            return overload._op_dk(composite, *args)
        rules._say(name.rstrip("_"), dtype, op == rules.avg and dtype in ok, via=" (functional collectives)")
        if kind == "reduce":
            results = tensors if in_place else [t.clone(memory_format=torch.contiguous_format) for t in tensors]
            rules._compute("all_reduce", results, op, group)
        else:
            world = args[2]
            results = []
            for t in tensors:
                out = t.new_empty((t.shape[0] // world,) + tuple(t.shape[1:]))
                rules._compute("reduce_scatter_tensor", [t.contiguous()], op, group, out)
                results.append(out)
        return results if listed else results[0]

    kernel.__name__ = f"transfer_{name}"
    return kernel


def _functional_op(dist, reduce_op):
    """The ReduceOp of a functional collective's reduce_op argument (a name, or a ReduceOp where torch passes one)."""
    if isinstance(reduce_op, str):
        name = _FUNCTIONAL_OPS.get(reduce_op.lower())
        return None if name is None else getattr(dist.ReduceOp, name)
    return reduce_op if isinstance(reduce_op, (dist.ReduceOp, dist.ReduceOp.RedOpType)) else None

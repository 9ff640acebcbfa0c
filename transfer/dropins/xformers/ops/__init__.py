"""xformers.ops, provided by transfer: memory_efficient_attention, its attention biases and operator classes,
SwiGLU / swiglu, scaled_index_add and index_select_cat (what each computes: the modules' docstrings)."""

from transfer.dropins._missing import missing
import torch

from xformers.ops.fmha import (  # noqa: F401 (as xformers.ops: the other biases live in xformers.ops.fmha.attn_bias)
    AttentionBias,
    AttentionOp,
    AttentionOpBase,
    LowerTriangularMask,
    MemoryEfficientAttentionCkOp,
    MemoryEfficientAttentionCutlassFwdFlashBwOp,
    MemoryEfficientAttentionCutlassOp,
    MemoryEfficientAttentionFlashAttentionOp,
    MemoryEfficientAttentionSplitKCkOp,
    memory_efficient_attention,
    memory_efficient_attention_backward,
    memory_efficient_attention_forward,
    memory_efficient_attention_forward_requires_grad,
)
from xformers.ops.common import _get_storage_base  # noqa: E402
from xformers.ops.indexing import index_select_cat, scaled_index_add  # noqa: F401,E402
from xformers.ops.swiglu_op import (  # noqa: F401,E402
    SwiGLU, SwiGLUEagerOp, SwiGLUFusedOp, SwiGLUOp, SwiGLUOpDispatch, SwiGLUPackedFusedOp, swiglu,
)

AttentionMask = AttentionBias


def unbind(x: torch.Tensor, dim: int):
    """torch.unbind (xformers' version avoids a copy in backward; same values)."""
    return torch.unbind(x, dim)


def get_stack_strides(tensors, dim: int):
    """The strides of ``torch.stack(tensors, dim)`` if the tensors already lie so in one storage (same shape
    and strides, storage offsets a constant step apart: the views `unbind` returns), else None; as xformers."""
    if len(tensors) <= 1 or dim > tensors[0].ndim:
        return None
    first = tensors[0]
    step = tensors[1].storage_offset() - first.storage_offset()
    strides = list(first.stride())
    strides.insert(dim, step)
    base = _get_storage_base(first)
    for i, x in enumerate(tensors[1:], 1):
        if (x.shape != first.shape or x.stride() != first.stride()
                or x.storage_offset() != first.storage_offset() + i * step or _get_storage_base(x) != base):
            return None
    return tuple(strides)


def stack_or_none(tensors, dim: int):
    """``torch.stack(tensors, dim)`` as a view of their storage, without a copy, where `get_stack_strides`
    finds one; else None."""
    strides = get_stack_strides(tensors, dim)
    if strides is None:
        return None
    shape = list(tensors[0].shape)
    shape.insert(dim, len(tensors))
    return tensors[0].as_strided(shape, strides)


_PROVIDED = sorted(n for n in dir() if not n.startswith("_") and n not in ("torch", "missing"))


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise missing('xformers.ops', name, _PROVIDED, 'xformers')

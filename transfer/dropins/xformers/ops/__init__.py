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
from xformers.ops.indexing import index_select_cat, scaled_index_add  # noqa: F401,E402
from xformers.ops.swiglu_op import (  # noqa: F401,E402
    SwiGLU, SwiGLUEagerOp, SwiGLUFusedOp, SwiGLUOp, SwiGLUOpDispatch, SwiGLUPackedFusedOp, swiglu,
)

AttentionMask = AttentionBias


def unbind(x: torch.Tensor, dim: int):
    """torch.unbind (xformers' version avoids a copy in backward; same values)."""
    return torch.unbind(x, dim)


def stack_or_none(*args, **kwargs):
    return None


_PROVIDED = sorted(n for n in dir() if not n.startswith("_") and n not in ("torch", "missing"))


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise missing('xformers.ops', name, _PROVIDED, 'xformers')

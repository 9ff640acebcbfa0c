"""rotary_emb: flash-attention's compiled rotary extension (csrc/rotary, the module its older
layers and TinyLlama import), served in torch with the kernel's arithmetic.

``apply_rotary(x1, x2, cos, sin, out1, out2, conj)``: writes ``out1 = x1*cos - x2*sin`` and
``out2 = x1*sin + x2*cos`` (``conj``: ``x1*cos + x2*sin`` and ``-x1*sin + x2*cos``), each element
computed in float32 and stored in the outputs' dtype; the inputs broadcast as a TensorIterator's do.
"""

import torch

__all__ = ["apply_rotary"]


def apply_rotary(x1: torch.Tensor, x2: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out1: torch.Tensor,
                 out2: torch.Tensor, conj: bool) -> None:
    if not (x1.dtype == x2.dtype == cos.dtype == sin.dtype == out1.dtype == out2.dtype):
        raise RuntimeError("rotary_emb.apply_rotary: x1, x2, cos, sin, out1 and out2 must have one dtype "
                           f"(got {x1.dtype}, {x2.dtype}, {cos.dtype}, {sin.dtype}, {out1.dtype}, {out2.dtype})")
    if x1.shape != x2.shape:
        raise RuntimeError(f"rotary_emb.apply_rotary: x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} differ in shape")
    a, b, c, s = x1.float(), x2.float(), cos.float(), sin.float()
    if conj:
        first, second = a * c + b * s, -a * s + b * c
    else:
        first, second = a * c - b * s, a * s + b * c
    out1.copy_(first)
    out2.copy_(second)

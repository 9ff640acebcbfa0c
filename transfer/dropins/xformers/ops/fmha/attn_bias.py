"""xformers.ops.fmha.attn_bias (0.0.29 API): the attention biases public code passes.

Semantics as in xformers: LowerTriangularMask is causal from the TOP-LEFT corner (query i
sees keys j <= i); the *FromBottomRight* variants shift it so the last query sees the last
key; BlockDiagonal* masks split packed sequences ([1, total, H, K]) into blocks, the causal
ones top-left per block (FromBottomRight: bottom-right per block); the local-attention
variants keep keys within `window_size` (j > i + shift - window_size). Unlike xformers'
LowerTriangularMask (a torch.Tensor subclass), these are plain objects; AttentionBiasSubTensor, the base
xformers gives its tensor-subclass biases, is their base here as there. The paged and gappy masks are named
(xformers' tests refer to them) but not provided: constructing one raises NotImplementedError.
"""

import math
from typing import List, Optional, Sequence, Tuple, Union

import torch


class AttentionBias:
    """Base class of the structured biases accepted by memory_efficient_attention."""

    HOLDS_DENSE_TENSOR = False

    def materialize(self, shape: Tuple[int, ...], dtype: torch.dtype = torch.float32,
                    device: Union[str, torch.device] = "cpu") -> torch.Tensor:
        raise NotImplementedError()


def _causal(shape, dtype, device, window_size=None, from_bottomright=False):
    nq, nk = shape[-2:]
    shift = nk - nq if from_bottomright else 0
    mask = torch.tril(torch.ones(shape, dtype=torch.float32, device=device), diagonal=shift)
    if window_size is not None:
        mask = torch.triu(mask, diagonal=shift - window_size + 1)
    return torch.log(mask).to(dtype)


class AttentionBiasSubTensor(AttentionBias):
    """The base of LowerTriangularMask and LowerTriangularMaskWithTensorBias (in xformers a torch.Tensor
    subclass); HOLDS_DENSE_TENSOR says whether ``_subtensor`` is a dense bias."""

    HOLDS_DENSE_TENSOR = False


class LowerTriangularMask(AttentionBiasSubTensor):
    """Causal, from the top-left corner."""

    _top_left, _window = True, None

    def __init__(self, *args, **kwargs):
        pass

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        return _causal(shape, dtype, device)

    def add_bias(self, bias: torch.Tensor) -> "LowerTriangularMaskWithTensorBias":
        return LowerTriangularMaskWithTensorBias(bias)

    def to(self, device):
        return self


class LowerTriangularMaskWithTensorBias(LowerTriangularMask):
    """Top-left causal plus an additive tensor bias."""

    HOLDS_DENSE_TENSOR = True

    def __init__(self, bias: torch.Tensor):
        self._bias = bias

    @property
    def _subtensor(self) -> torch.Tensor:
        return self._bias

    def to(self, device):
        return LowerTriangularMaskWithTensorBias(self._bias.to(device))

    def __getitem__(self, index) -> "LowerTriangularMaskWithTensorBias":
        """Indexing slices the tensor bias, as on xformers' tensor subclass."""
        return LowerTriangularMaskWithTensorBias(self._bias[index])

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        return super().materialize(shape, dtype, device) + self._bias


class LowerTriangularFromBottomRightMask(AttentionBias):
    """Causal, the last query seeing the last key."""

    _top_left, _window = False, None

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        return _causal(shape, dtype, device, from_bottomright=True)

    def make_local_attention(self, window_size: int) -> "LowerTriangularFromBottomRightLocalAttentionMask":
        return LowerTriangularFromBottomRightLocalAttentionMask(window_size)

    def to(self, device):
        return self


class LowerTriangularFromBottomRightLocalAttentionMask(LowerTriangularFromBottomRightMask):
    """Bottom-right causal within `window_size` keys."""

    def __init__(self, _window_size: int):
        if _window_size <= 0:
            raise ValueError(f"Expected `window_size > 0`, but window_size={_window_size}")
        self._window = self._window_size = _window_size

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        return _causal(shape, dtype, device, window_size=self._window, from_bottomright=True)


class LocalAttentionFromBottomRightMask(AttentionBias):
    """Query i sees key j when -window_left <= j - (nk - nq) - i <= window_right (bottom-right aligned)."""

    def __init__(self, window_left: int, window_right: int):
        if window_left < 0 or window_right < 0:
            raise ValueError(f"Invalid window value passed to `LocalAttentionFromBottomRightMask`: expected "
                             f"`window_left > 0` and `window_right > 0` but got window_left={window_left} and "
                             f"window_right={window_right}")
        self.window_left, self.window_right = window_left, window_right

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        nq, nk = shape[-2:]
        i = torch.arange(nq, device=device).view(-1, 1)
        j = torch.arange(nk, device=device).view(1, -1) - (nk - nq)
        keep = ((j - i) >= -self.window_left) & ((j - i) <= self.window_right)
        return torch.zeros(shape, dtype=dtype, device=device).masked_fill(~keep, float("-inf"))

    def to(self, device):
        return self


class _SeqLenInfo:
    def __init__(self, seqstart: torch.Tensor, max_seqlen: int, min_seqlen: int, seqstart_py: List[int]):
        self.seqstart, self.max_seqlen, self.min_seqlen, self.seqstart_py = seqstart, max_seqlen, min_seqlen, seqstart_py

    def intervals(self):
        yield from zip(self.seqstart_py, self.seqstart_py[1:])

    @classmethod
    def from_seqlens(cls, seqlens, *, device=None) -> "_SeqLenInfo":
        if isinstance(seqlens, torch.Tensor):
            seqlens = seqlens.tolist()
        starts = [0]
        for n in seqlens:
            starts.append(starts[-1] + int(n))
        lens = [int(n) for n in seqlens]
        return cls(torch.tensor(starts, dtype=torch.int32, device=device), max(lens), min(lens), starts)

    def to(self, device):
        return _SeqLenInfo(self.seqstart.to(device), self.max_seqlen, self.min_seqlen, self.seqstart_py)

    def split(self, x: torch.Tensor, batch_sizes: Optional[Sequence[int]] = None) -> List[torch.Tensor]:
        if self.seqstart_py[-1] != x.shape[1] or x.shape[0] != 1:
            raise ValueError(f"Invalid `torch.Tensor` of shape {x.shape}, expected format (B, M, *) with B=1 and "
                             f"M={self.seqstart_py[-1]}\n seqstart: {self.seqstart_py}")
        if batch_sizes is None:
            batch_sizes = [1] * (len(self.seqstart_py) - 1)
        chunks, it = [], 0
        for bs in batch_sizes:
            chunks.append(self.seqstart_py[it + bs] - self.seqstart_py[it])
            it += bs
        return [t.reshape([bs, -1, *t.shape[2:]]) for bs, t in zip(batch_sizes, x.split(chunks, dim=1))]


class BlockDiagonalMask(AttentionBias):
    """Queries in block i attend only to keys in block i."""

    _causal, _top_left, _window = False, True, None

    def __init__(self, q_seqinfo: _SeqLenInfo, k_seqinfo: _SeqLenInfo, _batch_sizes=None, _window_size=None):
        self.q_seqinfo, self.k_seqinfo, self._batch_sizes = q_seqinfo, k_seqinfo, _batch_sizes
        if _window_size is not None:
            self._window = self._window_size = _window_size

    def _block(self, shape, dtype, device):
        if not self._causal:
            return torch.zeros(shape, dtype=dtype, device=device)
        return _causal(shape, dtype, device, window_size=self._window, from_bottomright=not self._top_left)

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        assert shape[-1] == self.k_seqinfo.seqstart_py[-1], (shape[-1], self.k_seqinfo.seqstart_py[-1])
        assert shape[-2] == self.q_seqinfo.seqstart_py[-1], (shape[-2], self.q_seqinfo.seqstart_py[-1])
        mask = torch.full(shape[-2:], -math.inf, dtype=dtype, device=device)
        for (qs, qe), (ks, ke) in zip(self.q_seqinfo.intervals(), self.k_seqinfo.intervals()):
            mask[qs:qe, ks:ke] = self._block((qe - qs, ke - ks), dtype, device)
        for _ in range(len(shape) - 2):
            mask = mask.unsqueeze(0)
        return mask.expand(shape)

    @classmethod
    def from_seqlens(cls, q_seqlen, kv_seqlen=None, *, device=None):
        assert kv_seqlen is None or len(q_seqlen) == len(kv_seqlen)
        q_info = _SeqLenInfo.from_seqlens(q_seqlen, device=device)
        k_info = q_info if kv_seqlen is None or list(q_seqlen) == list(kv_seqlen) else \
            _SeqLenInfo.from_seqlens(kv_seqlen, device=device)
        return cls(q_seqinfo=q_info, k_seqinfo=k_info)

    @classmethod
    def from_tensor_list(cls, tensors: Sequence[torch.Tensor]):
        batch_sizes = [t.shape[0] for t in tensors]
        seqlens = [t.shape[1] for t in tensors for _ in range(t.shape[0])]
        bias = cls.from_seqlens(seqlens)
        bias._batch_sizes = batch_sizes
        return bias, torch.cat([t.reshape([1, -1, *t.shape[2:]]) for t in tensors], dim=1)

    @classmethod
    def from_tensor_lists_qkv(cls, tensors_q, tensors_k, tensors_v=None):
        batch_sizes = [t.shape[0] for t in tensors_q]
        q_lens = [q.shape[1] for q in tensors_q for _ in range(q.shape[0])]
        k_lens = [k.shape[1] for k in tensors_k for _ in range(k.shape[0])]
        bias = cls.from_seqlens(q_lens, k_lens)
        bias._batch_sizes = batch_sizes

        def cat(ts):
            return torch.cat([t.reshape([1, -1, *t.shape[2:]]) for t in ts], dim=1)

        return bias, cat(tensors_q), cat(tensors_k), cat(tensors_v) if tensors_v is not None else None

    def split_queries(self, tensor):
        return self.q_seqinfo.split(tensor, self._batch_sizes)

    def split_kv(self, tensor):
        return self.k_seqinfo.split(tensor, self._batch_sizes)

    def split(self, tensor):
        assert self.q_seqinfo is self.k_seqinfo
        return self.q_seqinfo.split(tensor, self._batch_sizes)

    def _as(self, cls, window=None):
        return cls(self.q_seqinfo, self.k_seqinfo, self._batch_sizes, window)

    def make_causal(self):
        return self._as(BlockDiagonalCausalMask)

    def make_causal_from_bottomright(self):
        return self._as(BlockDiagonalCausalFromBottomRightMask)

    def make_local_attention(self, window_size: int):
        return self._as(BlockDiagonalCausalLocalAttentionMask, window_size)

    def make_local_attention_from_bottomright(self, window_size: int):
        return self._as(BlockDiagonalCausalLocalAttentionFromBottomRightMask, window_size)

    def to(self, device):
        return type(self)(self.q_seqinfo.to(device), self.k_seqinfo.to(device), self._batch_sizes, self._window)


class BlockDiagonalCausalMask(BlockDiagonalMask):
    """Each block causal from its top-left corner."""

    _causal = True


class BlockDiagonalCausalFromBottomRightMask(BlockDiagonalMask):
    """Each block causal from its bottom-right corner (a non-causal prefix of keys)."""

    _causal, _top_left = True, False


class BlockDiagonalCausalLocalAttentionMask(BlockDiagonalCausalMask):
    """Each block causal (top-left) within `_window_size` keys."""


class BlockDiagonalCausalLocalAttentionFromBottomRightMask(BlockDiagonalCausalFromBottomRightMask):
    """Each block causal (bottom-right) within `_window_size` keys."""


class _PaddedSeqLenInfo(_SeqLenInfo):
    """Blocks padded to one length: block i holds [i*padding, i*padding + seqlen_py[i]) of the dimension."""

    def __init__(self, seqstart, max_seqlen, min_seqlen, seqstart_py, seqlen, seqlen_py, padding):
        super().__init__(seqstart, max_seqlen, min_seqlen, seqstart_py)
        self.seqlen, self.seqlen_py, self.padding = seqlen, seqlen_py, padding

    def intervals(self):
        for (start, _), length in zip(super().intervals(), self.seqlen_py):
            yield start, start + length

    @classmethod
    def from_seqlens(cls, seqlens, *, device=None):
        raise RuntimeError("Use either `_SeqLenInfo.from_seqlens` or `_PaddedSeqLenInfo.from_seqlens_padded`")

    @classmethod
    def from_seqlens_padded(cls, seqlens: Sequence[int], padding: int, *, device=None) -> "_PaddedSeqLenInfo":
        assert not isinstance(seqlens, torch.Tensor)
        assert all(seqlen <= padding for seqlen in seqlens), f"Seqlens {seqlens} Padding {padding}"
        starts = list(range(0, len(seqlens) * padding + 1, padding))
        return cls(torch.tensor(starts, dtype=torch.int32, device=device), max(seqlens), min(seqlens), starts,
                   torch.tensor(seqlens, dtype=torch.int32, device=device), list(seqlens), padding)

    def to(self, device):
        return _PaddedSeqLenInfo(self.seqstart.to(device), self.max_seqlen, self.min_seqlen, self.seqstart_py,
                                 self.seqlen.to(device), self.seqlen_py, self.padding)

    def split(self, x, batch_sizes=None):
        raise NotImplementedError("_PaddedSeqLenInfo.split")


class BlockDiagonalPaddedKeysMask(AttentionBias):
    """Packed queries ([1, sum(q_seqlen), H, K]) over keys padded per block ([1, B * kv_padding, H, K]):
    a query of block i sees the keys in use of block i, [i*kv_padding, i*kv_padding + kv_seqlen[i]),
    never the padding (the layout of KV-cache decoding)."""

    _causal, _top_left, _window = False, False, None

    def __init__(self, q_seqinfo: _SeqLenInfo, k_seqinfo: _PaddedSeqLenInfo, _window_size=None):
        self.q_seqinfo, self.k_seqinfo = q_seqinfo, k_seqinfo
        if _window_size is not None:
            self._window = self._window_size = _window_size

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        if shape[-1] != self.k_seqinfo.seqstart_py[-1]:
            raise ValueError("k shapes wrong")
        if shape[-2] != self.q_seqinfo.seqstart_py[-1]:
            raise ValueError("q shapes wrong")
        return BlockDiagonalMask.materialize(self, shape, dtype, device)

    _block = BlockDiagonalMask._block  # a block is open, or causal from its bottom-right corner (the offset)

    @classmethod
    def from_seqlens(cls, q_seqlen: Sequence[int], kv_padding: int, kv_seqlen: Sequence[int], causal_diagonal=None,
                     *, device=None):
        """causal_diagonal: unused, as in xformers (kept for old callers)."""
        assert kv_seqlen is None or len(q_seqlen) == len(kv_seqlen), (q_seqlen, kv_seqlen)
        return cls(_SeqLenInfo.from_seqlens(q_seqlen, device=device),
                   _PaddedSeqLenInfo.from_seqlens_padded(kv_seqlen, kv_padding, device=device))

    def to(self, device):
        return type(self)(self.q_seqinfo.to(device), self.k_seqinfo.to(device), self._window)


class BlockDiagonalCausalWithOffsetPaddedKeysMask(BlockDiagonalPaddedKeysMask):
    """As BlockDiagonalPaddedKeysMask, each block causal from its bottom-right corner: a query sees no key
    nearer to the block's last key in use than it is to the block's last query."""

    _causal = True
    causal_diagonal = None  # unused, as in xformers


class BlockDiagonalCausalLocalAttentionPaddedKeysMask(BlockDiagonalPaddedKeysMask):
    """As BlockDiagonalCausalWithOffsetPaddedKeysMask, within `_window_size` keys."""

    _causal = True

    @classmethod
    def from_seqlens_local(cls, q_seqlen: Sequence[int], kv_padding: int, kv_seqlen: Sequence[int],
                           window_size: int):
        assert kv_seqlen is None or len(q_seqlen) == len(kv_seqlen), (q_seqlen, kv_seqlen)
        return cls(_SeqLenInfo.from_seqlens(q_seqlen), _PaddedSeqLenInfo.from_seqlens_padded(kv_seqlen, kv_padding),
                   window_size)


class _NotProvided(AttentionBias):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"xformers.ops.fmha.attn_bias.{type(self).__name__} is not provided by transfer "
                                  "(paged and gappy KV caches); the BlockDiagonal*PaddedKeysMask masks are")

    @classmethod
    def from_seqlens(cls, *args, **kwargs):
        return cls()


class BlockDiagonalGappyKeysMask(_NotProvided):
    """Not provided (named for code that refers to it)."""


class BlockDiagonalCausalWithOffsetGappyKeysMask(BlockDiagonalGappyKeysMask):
    """Not provided (named for code that refers to it)."""


class PagedBlockDiagonalGappyKeysMask(_NotProvided):
    """Not provided (named for code that refers to it)."""


class PagedBlockDiagonalPaddedKeysMask(_NotProvided):
    """Not provided (named for code that refers to it)."""


class PagedBlockDiagonalCausalWithOffsetPaddedKeysMask(PagedBlockDiagonalPaddedKeysMask):
    """Not provided (named for code that refers to it)."""


#: xformers' varlen biases that transfer provides (its paged and gappy ones are not)
VARLEN_BIASES = (BlockDiagonalMask, BlockDiagonalPaddedKeysMask)

__all__ = [n for n, v in list(globals().items())
           if isinstance(v, type) and issubclass(v, AttentionBias) and not n.startswith("_")]

"""flash_attn.utils.generation (2.7 API): ``InferenceParams``, the KV-cache state flash_attn's MHA reads and
fills in generation (``key_value_memory_dict[layer_idx]``: [max_batch_size, max_seqlen, 2, nheads_kv,
head_dim]; ``seqlen_offset``: the tokens already cached; ``lengths_per_sample``: per-sequence lengths).
flash-attention's decoding loops (``decode``, ``GenerationMixin``) are not provided: importing them raises
ImportError naming what is.
"""

from dataclasses import dataclass, field
from typing import Optional

from torch import Tensor

from transfer.dropins._missing import missing

__all__ = ["InferenceParams"]


@dataclass
class InferenceParams:
    """Inference parameters passed to the model to store the context (the KV cache) during generation."""

    max_seqlen: int
    max_batch_size: int
    seqlen_offset: int = 0
    batch_size_offset: int = 0
    key_value_memory_dict: dict = field(default_factory=dict)
    lengths_per_sample: Optional[Tensor] = None

    def reset(self, max_seqlen, max_batch_size):
        self.max_seqlen = max_seqlen
        self.max_batch_size = max_batch_size
        self.seqlen_offset = 0
        if self.lengths_per_sample is not None:
            self.lengths_per_sample.zero_()


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise missing("flash_attn.utils.generation", name, __all__, "flash_attn")

"""flash_attn.bert_padding (2.7 API): remove and restore padding tokens.

Plain torch indexing, differentiable through autograd's own index/index_put
backward (the real module's custom autograd functions compute the same).
``unpad_input`` returns five values, as flash_attn >= 2.7.0 does (the fifth,
``seqused``, is the count of tokens in `attention_mask` alone); 2.6 and older
returned the first four, which is why ``flash_attn.__version__`` is 2.7.4.post1.
"""

import torch
import torch.nn.functional as F


def index_first_axis(input, indices):
    """``input[indices]`` along the first axis (input: (b, ...), indices: (n,))."""
    assert input.ndim >= 2
    return input[indices]


def index_put_first_axis(values, indices, first_axis_dim):
    """A zero tensor of first axis `first_axis_dim` with ``out[indices] = values``."""
    assert indices.ndim == 1
    assert values.ndim >= 2
    output = values.new_zeros((first_axis_dim, *values.shape[1:]))
    return output.index_put((indices,), values)


def index_first_axis_residual(input, indices):
    """``(input[indices], input.detach())``, as the real helper returns."""
    assert input.ndim >= 2
    return input[indices], input.detach()


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """(b, s, ...) -> (hidden (total_nnz, ...), indices, cu_seqlens (b+1, int32), max_seqlen (int), seqused (b, int32)).

    `attention_mask` (b, s): 1/True for valid tokens; `unused_mask` (b, s): tokens
    allocated but unused, kept in the output and in `cu_seqlens` but not in `seqused`.
    """
    all_masks = (attention_mask + unused_mask) if unused_mask is not None else attention_mask
    seqlens_in_batch = all_masks.sum(dim=-1, dtype=torch.int32)
    used_seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = seqlens_in_batch.max().item()
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen_in_batch, used_seqlens_in_batch


def unpad_input_for_concatenated_sequences(hidden_states, attention_mask_in_length):
    """Several short samples packed per row: `attention_mask_in_length` (b, s) holds each
    sample's length in order, then zeros. Returns (hidden, indices, cu_seqlens, max_seqlen)."""
    length = attention_mask_in_length.sum(dim=-1)
    seqlen = attention_mask_in_length.size(-1)
    mask_2d = torch.arange(seqlen, device=length.device, dtype=length.dtype).expand(len(length), seqlen) \
        < length.unsqueeze(1)
    real_indices_idx = torch.nonzero(attention_mask_in_length.flatten(), as_tuple=False).flatten()
    seqlens_in_batch = attention_mask_in_length.flatten()[real_indices_idx]
    indices = torch.nonzero(mask_2d.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = seqlens_in_batch.max().item()
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen_in_batch


def pad_input(hidden_states, indices, batch, seqlen):
    """(total_nnz, ...) -> (batch, seqlen, ...), zeros where no token was selected."""
    output = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return output.reshape(batch, seqlen, *hidden_states.shape[1:])

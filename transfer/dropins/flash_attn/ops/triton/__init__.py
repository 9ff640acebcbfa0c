"""flash_attn.ops.triton, provided by transfer: layer_norm (plain torch, no Triton)."""

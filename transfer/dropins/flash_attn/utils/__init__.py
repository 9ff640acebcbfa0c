"""flash_attn.utils (2.7 API): of flash-attention's utilities, generation.InferenceParams (MHA's KV cache)."""

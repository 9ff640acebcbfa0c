"""flash_attn.ops, provided by transfer: the norms public code imports (rms_norm, layer_norm, triton.layer_norm)."""

"""flash_attn.layers, provided by transfer: rotary."""

"""apex.contrib, provided by transfer: clip_grad only (the other contrib packages are CUDA extensions)."""

from .clip_grad import clip_grad_norm_  # noqa: F401

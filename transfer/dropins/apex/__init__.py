"""NVIDIA apex, provided by transfer (see transfer/dropins/__init__.py).

Loaded under the public name ``apex`` where apex's CUDA kernels cannot run:
``apex.amp`` (on torch.amp), ``apex.optimizers`` (FusedAdam, FusedLAMB,
FusedSGD), ``apex.normalization`` (FusedLayerNorm, FusedRMSNorm and the
Mixed variants), ``apex.parallel`` (DistributedDataParallel, SyncBatchNorm,
convert_syncbn_model, LARC), ``apex.multi_tensor_apply`` over transfer's
``amp_C``, ``apex.mlp`` (MLP), ``apex.fp16_utils`` (the parameter helpers) and
``apex.contrib.clip_grad``. Other apex modules (transformer, the other contrib
packages, ...) are not provided: importing them raises ModuleNotFoundError
naming these.
"""

import torch

__all__ = ["amp", "optimizers", "normalization", "multi_tensor_apply"]

if torch.distributed.is_available():
    from . import parallel  # noqa: F401

    __all__.append("parallel")

from . import amp, multi_tensor_apply, normalization, optimizers  # noqa: E402,F401

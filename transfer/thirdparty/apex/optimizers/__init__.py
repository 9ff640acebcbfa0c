"""apex.optimizers, provided by transfer: FusedAdam, FusedLAMB, FusedSGD with apex's update rules.

The updates run as torch foreach ops (transfer/thirdparty/_multi_tensor.py), or
torch's fused Adam(W) kernel where the target has one and the parameters are
float32. apex's FusedNovoGrad, FusedAdagrad and FusedMixedPrecisionLamb are
not provided.
"""

from .fused_adam import FusedAdam
from .fused_lamb import FusedLAMB
from .fused_sgd import FusedSGD

__all__ = ["FusedAdam", "FusedLAMB", "FusedSGD"]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"module 'apex.optimizers' has no attribute {name!r}: transfer's apex provides "
                         f"{', '.join(__all__)} (apex's CUDA kernels cannot run on this target). "
                         "See the README's 'CUDA-only packages'.")

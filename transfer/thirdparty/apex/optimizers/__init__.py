"""apex.optimizers, provided by transfer: FusedAdam, FusedLAMB, FusedSGD with apex's update rules.

The updates run as torch foreach ops (transfer/thirdparty/_multi_tensor.py), or
torch's fused Adam(W) kernel where the target has one and the parameters are
float32. apex's FusedNovoGrad, FusedAdagrad and FusedMixedPrecisionLamb are
not provided.
"""

from transfer.thirdparty._missing import missing
from .fused_adam import FusedAdam
from .fused_lamb import FusedLAMB
from .fused_sgd import FusedSGD

__all__ = ["FusedAdam", "FusedLAMB", "FusedSGD"]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise missing('apex.optimizers', name, __all__, 'apex')

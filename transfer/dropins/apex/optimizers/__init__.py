"""apex.optimizers, provided by transfer: FusedAdam, FusedLAMB, FusedSGD with apex's update rules.

The updates run as torch foreach ops (transfer/dropins/_multi_tensor.py), or
torch's fused Adam(W) kernel where the target has one and the parameters are
float32; FusedAdagrad likewise. apex's FusedNovoGrad and FusedMixedPrecisionLamb are
not provided: importing them raises ImportError naming what is.
"""

from transfer.dropins._missing import missing
from .fused_adagrad import FusedAdagrad
from .fused_adam import FusedAdam
from .fused_lamb import FusedLAMB
from .fused_sgd import FusedSGD

__all__ = ["FusedAdagrad", "FusedAdam", "FusedLAMB", "FusedSGD"]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise missing('apex.optimizers', name, __all__, 'apex')

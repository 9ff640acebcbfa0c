"""apex.optimizers, provided by transfer: FusedAdam, FusedLAMB, FusedSGD, FusedAdagrad, FusedNovoGrad,
FusedMixedPrecisionLamb with apex's update rules.

The updates run as torch foreach ops (transfer/dropins/_multi_tensor.py), or
torch's fused Adam(W) kernel where the target has one and the parameters are
float32. Any other name raises ImportError naming what is provided.
"""

from transfer.dropins._missing import missing
from .fused_adagrad import FusedAdagrad
from .fused_adam import FusedAdam
from .fused_lamb import FusedLAMB
from .fused_mixed_precision_lamb import FusedMixedPrecisionLamb
from .fused_novograd import FusedNovoGrad
from .fused_sgd import FusedSGD

__all__ = ["FusedAdagrad", "FusedAdam", "FusedLAMB", "FusedMixedPrecisionLamb", "FusedNovoGrad", "FusedSGD"]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise missing('apex.optimizers', name, __all__, 'apex')

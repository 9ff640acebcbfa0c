"""apex.fp16_utils (apex's API until its removal) in torch: the model/master parameter helpers.

``network_to_half``, ``FP16Model``, ``convert_network`` / ``convert_module``, ``BN_convert_float``,
``tofp16``, ``prep_param_lists``, ``model_grads_to_master_grads``, ``master_params_to_model_params``
(flat masters included), ``to_python_float``, ``clip_grad_norm``; ``FP16_Optimizer`` (fp16_optimizer.py)
and the legacy ``LossScaler`` / ``DynamicLossScaler`` (loss_scaler.py). Any other name raises
ImportError naming what is provided.
"""

from transfer.dropins._missing import missing

from .fp16util import (  # noqa: F401
    BN_convert_float, FP16Model, clip_grad_norm, convert_module, convert_network, master_params_to_model_params,
    model_grads_to_master_grads, network_to_half, prep_param_lists, to_python_float, tofp16,
)
from .fp16_optimizer import FP16_Optimizer  # noqa: F401
from .loss_scaler import DynamicLossScaler, LossScaler  # noqa: F401

__all__ = ["BN_convert_float", "DynamicLossScaler", "FP16Model", "FP16_Optimizer", "LossScaler", "clip_grad_norm",
           "convert_module", "convert_network", "master_params_to_model_params", "model_grads_to_master_grads", "network_to_half", "prep_param_lists",
           "to_python_float", "tofp16"]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise missing("apex.fp16_utils", name, __all__, "apex")

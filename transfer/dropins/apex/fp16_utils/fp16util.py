"""apex.fp16_utils.fp16util: half-precision models with float32 master parameters, as apex documents them."""

import torch
import torch.nn as nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

# One definition, in amp (apex.amp and apex.fp16_utils share them in apex too).
from ..amp._initialize import convert_module, convert_network  # noqa: F401


class tofp16(nn.Module):
    """``forward(input)`` is ``input.half()``."""

    def forward(self, input):
        return input.half()


def BN_convert_float(module):
    """Affine batch norms back to float32, recursively (network_to_half's helper)."""
    if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.affine is True:
        module.float()
    for child in module.children():
        BN_convert_float(child)
    return module


def network_to_half(network):
    """``Sequential(tofp16(), network in half with float32 affine batch norms)``."""
    return nn.Sequential(tofp16(), BN_convert_float(network.half()))


class FP16Model(nn.Module):
    """The network in half precision (batch-norm safe); inputs cast to half."""

    def __init__(self, network):
        super(FP16Model, self).__init__()
        self.network = convert_network(network, dtype=torch.half)

    def forward(self, *inputs):
        return self.network(*tuple(t.half() for t in inputs))


def prep_param_lists(model, flat_master=False):
    """(model_params, master_params): the trainable parameters and float32 copies of them (one flat
    Parameter with a gradient buffer when flat_master)."""
    model_params = [param for param in model.parameters() if param.requires_grad]
    if flat_master:
        master = torch.nn.Parameter(_flatten_dense_tensors([param.data for param in model_params]).float())
        if master.grad is None:
            master.grad = master.new(*master.size())
        return model_params, [master]
    master_params = [param.clone().float().detach() for param in model_params]
    for param in master_params:
        param.requires_grad = True
    return model_params, master_params


def model_grads_to_master_grads(model_params, master_params, flat_master=False):
    """The model's gradients copied into the masters' (None where the model's is None)."""
    if flat_master:
        master_params[0].grad.data.copy_(_flatten_dense_tensors([p.grad.data for p in model_params]))
        return
    for model, master in zip(model_params, master_params):
        if model.grad is not None:
            if master.grad is None:
                master.grad = master.data.new(*master.data.size())
            master.grad.data.copy_(model.grad.data)
        else:
            master.grad = None


def master_params_to_model_params(model_params, master_params, flat_master=False):
    """The masters' values copied into the model's parameters."""
    if flat_master:
        for model, master in zip(model_params, _unflatten_dense_tensors(master_params[0].data, model_params)):
            model.data.copy_(master)
        return
    for model, master in zip(model_params, master_params):
        model.data.copy_(master.data)


def to_python_float(t):
    return t.item() if hasattr(t, "item") else t[0]


clip_grad_norm = torch.nn.utils.clip_grad_norm_

"""apex.amp._initialize: casting models and patching optimizers for an opt_level (apex's logic).

O1 (``patch_torch_functions``): apex patches torch functions to cast per its
lists; here each model's forward runs under ``torch.autocast`` for the
model's device with apex's half dtype (float16; the target's policy may make
it bfloat16, e.g. on the cpu target), whose op lists cast as apex's do
(matmul/conv in half, softmax/norms/losses in float32). Floating outputs come
back in float32 (or ``cast_model_outputs``), which is what apex's float32
loss functions make of them; ops outside the models' forward are not cast
(apex patched them process-wide).
O2/O3 (``cast_model_type``): the model is cast to the half dtype (O2 keeps
affine BatchNorms in float32), its forward casts floating inputs to that dtype
and outputs to float32, and ``state_dict()`` answers float32, as apex does.
"""

import collections.abc as container_abcs
import functools
import warnings
from types import MethodType

import numpy as np
import torch

from transfer.dropins import _mixed

from ._amp_state import _amp_state, warn_or_err
from ._process_optimizer import _process_optimizer
from .scaler import LossScaler

_HALF = (torch.float16, torch.bfloat16)


def to_type(dtype, t):
    if isinstance(t, torch.Tensor):
        if not t.is_cuda:
            warnings.warn("An input tensor was not cuda.")
        if t.is_floating_point():
            return t.to(dtype)
        return t
    return t.to(dtype)


def applier(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    elif isinstance(value, str):
        return value
    elif isinstance(value, np.ndarray):
        return value
    elif hasattr(value, "to"):
        return fn(value)
    elif isinstance(value, container_abcs.Mapping):
        return {applier(k, fn): applier(v, fn) for k, v in value.items()}
    elif isinstance(value, container_abcs.Iterable):
        return type(value)(applier(v, fn) for v in value)
    return value


def check_models(models):
    from ..parallel import DistributedDataParallel as apex_DDP

    for model in models:
        parallel_type = None
        if isinstance(model, apex_DDP):
            parallel_type = "apex.parallel.DistributedDataParallel"
        elif isinstance(model, torch.nn.parallel.DistributedDataParallel):
            parallel_type = "torch.nn.parallel.DistributedDataParallel"
        if isinstance(model, torch.nn.parallel.DataParallel):
            parallel_type = "torch.nn.parallel.DataParallel"
        if parallel_type is not None:
            raise RuntimeError("Incoming model is an instance of {}. ".format(parallel_type) +
                               "Parallel wrappers should only be applied to the model(s) AFTER \n"
                               "the model(s) have been returned from amp.initialize.")


def check_params_fp32(models):
    for model in models:
        for kind, items in (("param", model.named_parameters()), ("buffer", model.named_buffers())):
            for name, tensor in items:
                if not tensor.is_floating_point():
                    continue
                if tensor.dtype in _HALF:
                    warn_or_err("Found {} {} with type {}, expected torch.cuda.FloatTensor.\n"
                                "When using amp.initialize, you do not need to call .half() on your model\n"
                                "before passing it, no matter what optimization level you choose.".format(
                                    kind, name, tensor.type()))
                elif not tensor.is_cuda:
                    warn_or_err("Found {} {} with type {}, expected torch.cuda.FloatTensor.\n"
                                "When using amp.initialize, you need to provide a model with {}s\n"
                                "located on a CUDA device before passing it no matter what optimization level\n"
                                "you chose. Use model.to('cuda') to use the default device.".format(
                                    kind, name, tensor.type(), kind))


def convert_module(module, dtype):
    for param in module.parameters(recurse=False):
        if param is not None:
            if param.data.dtype.is_floating_point:
                param.data = param.data.to(dtype=dtype)
            if param._grad is not None and param._grad.data.dtype.is_floating_point:
                param._grad.data = param._grad.data.to(dtype=dtype)
    for buf in module.buffers(recurse=False):
        if buf is not None and buf.data.dtype.is_floating_point:
            buf.data = buf.data.to(dtype=dtype)


def convert_network(network, dtype):
    """apex.fp16_utils.convert_network: every module but affine BatchNorms to `dtype`."""
    for module in network.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.affine is True:
            continue
        convert_module(module, dtype)
        if isinstance(module, torch.nn.RNNBase):
            module.flatten_parameters()
    return network


class O2StateDictHook(object):
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, module, state_dict, prefix, local_metadata):
        for key in state_dict:
            param = state_dict[key]
            if isinstance(param, torch.Tensor) and param.dtype in _HALF:
                state_dict[key] = param.to(torch.float32)


def _device_type(models) -> str:
    for model in models:
        for tensor in model.parameters():
            return tensor.device.type
    return "cpu"


def _half(properties, device_type):
    """apex's half (float16) as the target's policy has it; an explicit other dtype stays."""
    dtype = properties.cast_model_type
    return _mixed.half_dtype(device_type) if dtype is torch.float16 else dtype


def _initialize(models, optimizers, properties, num_losses=1, cast_model_outputs=None):
    optimizers_was_list = False
    if isinstance(optimizers, torch.optim.Optimizer):
        optimizers = [optimizers]
    elif optimizers is None:
        optimizers = []
    elif isinstance(optimizers, list):
        optimizers_was_list = True
    else:
        raise TypeError("optimizers must be either a single optimizer or a list of optimizers.")

    if isinstance(models, torch.nn.Module):
        models_was_list = False
        models = [models]
    elif isinstance(models, list):
        models_was_list = True
    else:
        raise TypeError("models must be either a single model or a list of models.")

    check_models(models)
    if not _amp_state.allow_incoming_model_not_fp32:
        check_params_fp32(models)

    device_type = _device_type(models)
    _amp_state.device_type = device_type
    if properties.cast_model_type:
        cast_type = _half(properties, device_type)
        if properties.keep_batchnorm_fp32:
            for model in models:
                convert_network(model, cast_type)
        else:
            for model in models:
                model.to(cast_type)
        input_caster = functools.partial(to_type, cast_type)
        output_caster = functools.partial(to_type, cast_model_outputs if cast_model_outputs is not None
                                          else torch.float32)
        for model in models:
            def patch_forward(old_fwd):
                def new_fwd(*args, **kwargs):
                    output = old_fwd(*applier(args, input_caster), **applier(kwargs, input_caster))
                    return applier(output, output_caster)
                return new_fwd

            model.forward = patch_forward(model.forward)
        for optimizer in optimizers:
            optimizer.load_state_dict(optimizer.state_dict())
        for model in models:
            for module in model.modules():
                module._register_state_dict_hook(O2StateDictHook(functools.partial(to_type, torch.float32)))
    elif properties.patch_torch_functions:
        half = _mixed.half_dtype(device_type)
        out_type = cast_model_outputs if cast_model_outputs is not None else torch.float32

        def cast_out(t):
            return t.to(out_type) if isinstance(t, torch.Tensor) and t.is_floating_point() else t

        for model in models:
            def patch_forward(old_fwd):
                def new_fwd(*args, **kwargs):
                    with torch.autocast(device_type=device_type, dtype=half):
                        output = old_fwd(*args, **kwargs)
                    return applier(output, cast_out)
                return new_fwd

            model.forward = patch_forward(model.forward)
        from .amp import _apply_registrations

        _apply_registrations(device_type, half)
    elif cast_model_outputs is not None:
        output_caster = functools.partial(to_type, cast_model_outputs)
        for model in models:
            def patch_forward(old_fwd):
                def new_fwd(*args, **kwargs):
                    return applier(old_fwd(*args, **kwargs), output_caster)
                return new_fwd

            model.forward = patch_forward(model.forward)

    for i, optimizer in enumerate(optimizers):
        optimizers[i] = _process_optimizer(optimizer, properties)

    _amp_state.loss_scalers = [LossScaler(properties.loss_scale, min_loss_scale=_amp_state.min_loss_scale,
                                          max_loss_scale=_amp_state.max_loss_scale) for _ in range(num_losses)]

    if properties.patch_torch_functions:
        for optimizer in optimizers:  # apex runs the step with its casts off
            def patch_step(old_step):
                def new_step(self, *args, **kwargs):
                    with torch.autocast(device_type=device_type, enabled=False):
                        return old_step(*args, **kwargs)
                return new_step

            optimizer.step = MethodType(patch_step(optimizer.step), optimizer)

    if optimizers_was_list:
        return (models if models_was_list else models[0]), optimizers
    if models_was_list:
        return models if len(optimizers) == 0 else (models, optimizers[0])
    return models[0] if len(optimizers) == 0 else (models[0], optimizers[0])

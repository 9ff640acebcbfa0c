"""Stand-in for torch_npu 2.13.0's ``torch_npu.contrib.transfer_to_npu`` (read in the PyPI wheel).

Importing it patches torch for good, as the real one does: ``functools.wraps``
closures around the same white-listed torch factories, ``Tensor`` / ``Module``
methods, ``torch.cuda`` functions and ``torch.distributed`` entry points,
rewriting device arguments by SUBSTRING (``'cuda'`` -> ``'npu'`` anywhere in a
string, so ``torch.load('/ckpt/cuda_model.pt')`` opens ``/ckpt/npu_model.pt``,
``'CUDA:0'`` is left alone, a positional int is a device only for ``to`` /
``to_empty``); every name of ``torch_npu.npu.__all__`` copied onto
``torch.cuda``; ``Tensor.is_cuda`` -> ``Tensor.is_npu``; ``Tensor.cuda`` /
``Module.cuda`` -> ``.npu``; nccl -> hccl in ``init_process_group`` and
``new_group``; ``torch.Generator`` a proxy class; ``torch.jit.script`` a no-op;
``warnings.filterwarnings('once')``; an ImportWarning banner. No undo, no
report, no switch: exactly what the real module offers.

Not simulated (the stand-in torch_npu lacks what they need, or they concern
torch.compile / profiling only): the inductor and triton patches
(``has_triton``, ``get_gpu_type``) and the inductor imports of ``_init``, the
profiler patches, ``ProcessGroupNCCL`` -> ``ProcessGroupHCCL``,
``torch.cuda.CUDAGraph`` -> ``NPUGraph``, the ``torch.cuda.random`` / ``amp.autocast_mode`` /
``amp.common`` / ``amp.grad_scaler`` module copies of ``_patch_cuda``, the memory-snapshot helpers,
``torch._C._host_emptyCache``, ``cpp_extension.include_paths``, the
``apis_config.json`` library wrappers, the profiler ``Kernel`` namedtuple.
"""

import os
import warnings
from functools import wraps

import torch
import torch.distributed
from torch.nn.parameter import UninitializedTensorMixin
from torch.utils._device import _device_constructors

import torch_npu

_device_constructors()

warnings.filterwarnings(action='once')

__all__ = []
use_jit_script = False  # torch_npu.utils._dynamo.use_jit_script in the real package

torch_fn_white_list = ['logspace', 'randint', 'hann_window', 'rand', 'full_like', 'ones_like', 'rand_like', 'randperm',
                       'arange', 'frombuffer', 'normal', '_empty_per_channel_affine_quantized', 'empty_strided',
                       'empty_like', 'scalar_tensor', 'tril_indices', 'bartlett_window', 'ones', 'sparse_coo_tensor',
                       'randn', 'kaiser_window', 'tensor', 'triu_indices', 'as_tensor', 'zeros', 'randint_like', 'full',
                       'eye', '_sparse_csr_tensor_unsafe', 'empty', '_sparse_coo_tensor_unsafe', 'blackman_window',
                       'zeros_like', 'range', 'sparse_csr_tensor', 'randn_like', 'from_file',
                       '_cudnn_init_dropout_state', '_empty_affine_quantized', 'linspace', 'hamming_window',
                       'empty_quantized', '_pin_memory', 'load', 'set_default_device',
                       'get_device_module', 'sparse_compressed_tensor']
torch_tensor_fn_white_list = ['new_empty', 'new_empty_strided', 'new_full', 'new_ones', 'new_tensor', 'new_zeros', 'to',
                              'pin_memory']
torch_module_fn_white_list = ['to', 'to_empty']
torch_cuda_fn_white_list = [
    'get_device_properties', 'get_device_name', 'get_device_capability', 'list_gpu_processes', 'set_device',
    'synchronize', 'mem_get_info', 'memory_stats', 'memory_summary', 'memory_allocated', 'max_memory_allocated',
    'reset_max_memory_allocated', 'memory_reserved', 'max_memory_reserved', 'reset_max_memory_cached',
    'reset_peak_memory_stats', 'default_stream', 'can_device_access_peer', 'current_stream', 'utilization',
    'set_per_process_memory_fraction', 'caching_allocator_alloc', 'get_rng_state', 'set_rng_state'
]
torch_distributed_fn_white_list = ['__init__']
device_kwargs_list = ['device', 'device_type', 'map_location', 'device_id']
is_available = torch.cuda.is_available


class _TorchTypeProxyMeta(type(torch.Generator)):
    def __instancecheck__(self, instance):
        return super().__instancecheck__(instance) or isinstance(instance, self.__mro__[1])


class _GeneratorProxy(torch.Generator, metaclass=_TorchTypeProxyMeta):
    def __new__(cls, device='cpu'):
        device = _replace_cuda_to_npu_in_list([device], None)[0]
        return super().__new__(cls, device)


def _wrapper_cuda(fn):
    @wraps(fn)
    def decorated(*args, **kwargs):
        replace_int = fn.__name__ in ['to', 'to_empty']
        if args:
            args = _replace_cuda_to_npu_in_list(list(args), replace_int)
        if kwargs:
            for device_arg in device_kwargs_list:
                device = kwargs.get(device_arg, None)
                if device is not None:
                    _replace_cuda_to_npu_in_kwargs(kwargs, device_arg, device)
            device_ids = kwargs.get('device_ids', None)
            if isinstance(device_ids, list):
                kwargs["device_ids"] = _replace_cuda_to_npu_in_list(device_ids, replace_int)
            elif isinstance(device_ids, tuple):
                kwargs["device_ids"] = tuple(_replace_cuda_to_npu_in_list(list(device_ids), replace_int))
        return fn(*args, **kwargs)

    return decorated


@torch._dynamo.disable
def _replace_cuda_to_npu_in_kwargs(kwargs, device_arg, device):
    if type(device) is str and 'cuda' in device:
        kwargs[device_arg] = device.replace('cuda', 'npu')
    elif type(device) is torch.device and 'cuda' in device.type:
        kwargs[device_arg] = torch.device('npu:{}'.format(device.index) if device.index is not None else 'npu')
    elif type(device) is int:
        kwargs[device_arg] = f'npu:{device}'
    elif type(device) is dict:
        kwargs[device_arg] = _replace_cuda_to_npu_in_dict(device)


@torch._dynamo.disable
def _replace_cuda_to_npu_in_list(args_list, replace_int):
    for idx, arg in enumerate(args_list):
        if isinstance(arg, str) and 'cuda' in arg:
            args_list[idx] = arg.replace('cuda', 'npu')
        elif isinstance(arg, torch.device) and 'cuda' in arg.type:
            args_list[idx] = torch.device('npu:{}'.format(arg.index) if arg.index is not None else 'npu')
        elif replace_int and not isinstance(arg, bool) and isinstance(arg, int):
            args_list[idx] = f'npu:{arg}'
        elif isinstance(arg, dict):
            args_list[idx] = _replace_cuda_to_npu_in_dict(arg)
    return args_list


@torch._dynamo.disable
def _replace_cuda_to_npu_in_dict(device_dict):
    new_dict = {}
    for key, value in device_dict.items():
        if isinstance(key, str):
            key = key.replace('cuda', 'npu')
        if isinstance(value, str):
            value = value.replace('cuda', 'npu')
        new_dict[key] = value
    return new_dict


def _device_wrapper(enter_fn, white_list):
    for fn_name in white_list:
        fn = getattr(enter_fn, fn_name, None)
        if fn:
            setattr(enter_fn, fn_name, _wrapper_cuda(fn))


def _wrapper_hccl(fn):
    @wraps(fn)
    def decorated(*args, **kwargs):
        if args:
            args_new = list(args)
            for idx, arg in enumerate(args_new):
                if type(arg) is str:
                    if 'nccl' in arg:
                        arg = arg.replace('nccl', 'hccl')
                    if 'cuda' in arg:
                        arg = arg.replace('cuda', 'npu')
                    args_new[idx] = arg
            args = args_new
        if kwargs:
            backend = kwargs.get('backend', None)
            if type(backend) is str:
                if 'nccl' in backend:
                    backend = backend.replace('nccl', 'hccl')
                if 'cuda' in backend:
                    backend = backend.replace('cuda', 'npu')
                kwargs['backend'] = backend
        return fn(*args, **kwargs)

    return decorated


_real_jit_script = torch.jit.script


def _jit_script(obj, *args, **kwargs):
    if use_jit_script:
        return _real_jit_script(obj, *args, **kwargs)
    return obj


def _jit_script_method(fn):
    return fn


def _patch_jit_script():
    warnings.warn('torch.jit.script and torch.jit.script_method will be disabled by transfer_to_npu, '
                  'which currently does not support them. If you need to enable them, '
                  'please do not use transfer_to_npu.', RuntimeWarning)
    torch.jit.script = _jit_script
    torch.jit.script_method = _jit_script_method


def _patch_get_available_device_type():
    if torch.npu.is_available():
        return 'npu'
    return None


def _apply_patches(monkey_patches):
    """torch_npu/_init/patches/monkey_patches.py: every name of the patch module's __all__ onto torch.<dest>."""
    for dest, patch in monkey_patches:
        dest_module = torch
        for part in dest.split("."):
            dest_module = getattr(dest_module, part)
        for attr in patch.__all__:
            setattr(dest_module, attr, getattr(patch, attr))


def _patch_cuda():
    _apply_patches([['cuda', torch_npu.npu], ['cuda.amp', torch_npu.npu.amp]])


def _warning_fn(msg, rank0=True):
    env_rank = os.getenv('RANK', None)
    if rank0 and env_rank:
        if env_rank == '0':
            warnings.warn(msg, ImportWarning)
    else:
        warnings.warn(msg, ImportWarning)


def _replace_to_method_in_allowed_methods():
    for i, method in enumerate(UninitializedTensorMixin._allowed_methods):
        if method.__name__ == "to":
            UninitializedTensorMixin._allowed_methods[i] = torch.Tensor.to
            break


def _compose_wrappers(*wrappers):
    def compose(f):
        for wrapper in wrappers:
            f = wrapper(f)
        return f
    return compose


def _init():
    _warning_fn('The torch.Tensor.cuda and torch.nn.Module.cuda are replaced with torch.Tensor.npu and '
                'torch.nn.Module.npu now.. The backend in torch.distributed.init_process_group set to hccl now..')

    # torch.cuda.*
    _patch_cuda()
    _device_wrapper(torch.cuda, torch_cuda_fn_white_list)
    torch.cuda.device.__init__ = _wrapper_cuda(torch.cuda.device.__init__)

    def _update_cuda_default_generators():
        torch.cuda.default_generators = torch_npu.npu.default_generators

    torch_npu.npu._lazy_call(_update_cuda_default_generators)

    # torch.*
    _device_wrapper(torch, torch_fn_white_list)
    torch.UntypedStorage.__new__ = _wrapper_cuda(torch.UntypedStorage.__new__)
    torch.Generator = _GeneratorProxy
    torch.amp.autocast_mode.autocast.__init__ = _wrapper_cuda(torch.amp.autocast_mode.autocast.__init__)
    if hasattr(torch, 'get_autocast_dtype'):
        torch.get_autocast_dtype = _wrapper_cuda(torch.get_autocast_dtype)
        torch.set_autocast_dtype = _wrapper_cuda(torch.set_autocast_dtype)
    if hasattr(torch.amp, 'custom_fwd'):
        torch.amp.custom_fwd = _wrapper_cuda(torch.amp.custom_fwd)
        torch.amp.custom_bwd = _wrapper_cuda(torch.amp.custom_bwd)

    # torch.Tensor.*
    _device_wrapper(torch.Tensor, torch_tensor_fn_white_list)
    torch.Tensor.cuda = torch.Tensor.npu
    torch.Tensor.is_cuda = torch.Tensor.is_npu
    torch.cuda.DoubleTensor = torch.npu.FloatTensor

    # torch.nn.Module.*
    _device_wrapper(torch.nn.Module, torch_module_fn_white_list)
    torch.nn.Module.cuda = torch.nn.Module.npu

    # torch.fft.*
    _device_wrapper(torch.fft, ['fftfreq', 'rfftfreq'])

    # torch.distributed
    torch.distributed.init_process_group = _compose_wrappers(_wrapper_cuda, _wrapper_hccl)(
        torch.distributed.init_process_group)
    torch.distributed.is_nccl_available = torch.distributed.is_hccl_available
    if hasattr(torch.distributed.distributed_c10d, '_new_group_with_tag'):  # the stand-in also runs on older torch
        torch.distributed.distributed_c10d._new_group_with_tag = _wrapper_hccl(
            torch.distributed.distributed_c10d._new_group_with_tag)

    # torch.nn.parallel.DistributedDataParallel
    _device_wrapper(torch.nn.parallel.DistributedDataParallel, torch_distributed_fn_white_list)

    torch.utils._device.DeviceContext.__init__ = _wrapper_cuda(torch.utils._device.DeviceContext.__init__)

    _patch_jit_script()

    torch._utils._get_available_device_type = _patch_get_available_device_type

    _replace_to_method_in_allowed_methods()


_init()

"""Test stand-in for Tecorigin ``torch_sdaa`` (device ``sdaa``, backend ``tccl``).

CPU-backed simulation for tests; never shipped. See ``tests/vendors/README.md``.

torch_sdaa is distributed by the vendor only, so ``torch.sdaa`` mirrors what
public code calls on it: DeepSpeed's ``accelerator/sdaa_accelerator.py``
(device/set_device/current_device/device_count/synchronize, RNG incl.
default_generators, Stream/stream/current_stream/default_stream/Event, the
memory_* statistics, get_device_properties, is_bf16_supported, _lazy_call)
plus the CUDA-style names every such module has (is_initialized, init,
device_of, StreamContext, set_stream, seed_all, *_rng_state_all,
get_device_name, mem_get_info, memory_summary, amp, get_amp_supported_dtype).
Not evidenced in public code, hence absent: get_device_capability,
is_current_stream_capturing, can_device_access_peer, memory_snapshot, the
autocast getters/setters, graphs, a tracing (nvtx-like) module.

tccl quirks simulated: init_process_group refuses to run before
torch.sdaa.set_device was called in the process, and two ranks on one host
may not use the same device index.
"""

from _sim_accel import VendorSpec, install
from _sim_accel import api as _api

__version__ = "2.13.0+sim"

import torch

# torch < 2.4's autocast requires these of every device module, so an sdaa build for it has them.
_NOT_IN_SDAA = () if not hasattr(torch, "get_autocast_dtype") else (
    "is_autocast_enabled", "set_autocast_enabled", "get_autocast_dtype", "set_autocast_dtype")

SPEC = VendorSpec(
    package="torch_sdaa",
    name="sdaa",
    visible_devices_env="SDAA_VISIBLE_DEVICES",
    backend="tccl",
    vendor="Tecorigin",
    api=tuple(n for n in _api.COMMON if n not in _NOT_IN_SDAA),
    device_name="T100 (simulated)",
    properties_class="_SdaaDeviceProperties",
    properties=(("multi_processor_count", 32),),
    capability=None,
    requires_set_device=True,
    one_process_per_device=True,
)

sdaa = install(SPEC)

# torch.ops.sdaa.fused_adam: the fused Adam(W) kernel DeepSpeed's SDAA accelerator calls for FusedAdam
# (deepspeed/ops/op_builder/sdaa/fused_adam.py). torch_sdaa is not public: the schema is that call's
# (grads, params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, beta1, beta2, eps, lr, weight_decay,
# adam_w_mode, step, bias_correction); the rule is DeepSpeed's FusedAdam's (apex's multi_tensor_adam,
# float32 math). Registered for sdaa tensors only, as a device kernel is.
_ops = torch.library.Library("sdaa", "DEF")
_ops.define("fused_adam(Tensor[] grads, Tensor(a!)[] params, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
            "Tensor[] max_exp_avg_sqs, float beta1, float beta2, float eps, float lr, float weight_decay, "
            "int adam_w_mode, int step, int bias_correction) -> ()")


def _fused_adam(grads, params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, beta1, beta2, eps, lr, weight_decay,
                adam_w_mode, step, bias_correction):
    if max_exp_avg_sqs:
        raise RuntimeError("sdaa::fused_adam: amsgrad (max_exp_avg_sqs) is not supported")
    bc1 = 1 - beta1 ** step if bias_correction else 1.0
    bc2 = 1 - beta2 ** step if bias_correction else 1.0
    for g, p, m, v in zip(grads, params, exp_avgs, exp_avg_sqs):
        g32, p32, m32, v32 = g.float(), p.float(), m.float(), v.float()
        if not adam_w_mode and weight_decay:
            g32 = g32 + weight_decay * p32
        m32 = beta1 * m32 + (1 - beta1) * g32
        v32 = beta2 * v32 + (1 - beta2) * g32 * g32
        update = (m32 / bc1) / (torch.sqrt(v32 / bc2) + eps)
        if adam_w_mode:
            update = update + weight_decay * p32
        p.copy_(p32 - lr * update)
        m.copy_(m32)
        v.copy_(v32)


_ops.impl("fused_adam", _fused_adam, "PrivateUse1")

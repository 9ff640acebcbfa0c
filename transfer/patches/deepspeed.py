"""DeepSpeed on the target: which DeepSpeed accelerator it takes, and its compiled ops.

DeepSpeed chooses its accelerator itself, once, in
``deepspeed.accelerator.real_accelerator.get_accelerator``: ``DS_ACCELERATOR`` if
set, else the first vendor plug-in it can import (torch_npu -> ``npu``,
torch_sdaa -> ``sdaa``, ...), else CUDA where ``torch.cuda.is_available()``,
else its CPU accelerator. Under transfer ``torch.cuda`` answers for the target,
so DeepSpeed alone would take its CUDA accelerator on the cpu target and on gcu:
device names ``cuda:N`` that are not where the tensors live (ZeRO-3's
``GatheredParameters`` refuses "Parameter 0 is on gcu:0 but broadcast requires
it to be on cuda:0") and CUDA op builders that nvcc-compile ``.cu`` files.
This area decides instead, per target, when DeepSpeed asks for the first time
(a ``DS_ACCELERATOR`` the user set always wins):

* npu, sdaa: DeepSpeed's own accelerator for the vendor, which its probe finds
  (nothing is changed). Its NPU op builders read ``ASCEND_HOME_PATH``, which
  CANN's ``set_env.sh`` sets on every Ascend host; where it is unset DeepSpeed
  dies with ``KeyError: 'ASCEND_HOME_PATH'``: transfer raises `CannNotSourced`
  naming set_env.sh instead.
* the cpu target and a vendor DeepSpeed has no accelerator for (gcu):
  `target_accelerator`, DeepSpeed's CUDA accelerator (the CUDA code paths the
  script takes on CUDA, answered by the target) under the target's device type
  and backend (``cpu``/gloo, ``gcu:N``/eccl). Not DeepSpeed's CPU accelerator on
  the cpu target: that one takes CPU-only paths and JIT-builds C++ ops (shm_comm,
  fused_adam) at start, minutes on a small machine. Its
  FusedAdam op (``multi_tensor_adam``) is served by transfer with DeepSpeed's
  update rule (transfer/dropins/_multi_tensor.py, shared with apex's
  amp_C); the host-side optimizers (DeepSpeedCPUAdam, ...) use DeepSpeed's CPU
  builders, as on CUDA; any other op builder is DeepSpeed's CUDA one, whose
  ``.cu`` build transfer refuses clearly (custom_ops).

Switches: ``TRANSFER_DISABLE=deepspeed`` (the area), ``deepspeed.accelerator``,
``deepspeed.cann_path``.
"""

from __future__ import annotations

import logging
import os
import sys

from ..errors import CannNotSourced

logger = logging.getLogger("transfer")

_REAL = "deepspeed.accelerator.real_accelerator"


def apply(ctx) -> None:
    reg = ctx.registry
    device = ctx.profile.device_type
    if not ctx.profile.deepspeed_accelerator:  # DeepSpeed's probe would take its CUDA accelerator
        reg.replace_when_imported("deepspeed.accelerator", _REAL, "", "get_accelerator",
                                  lambda original: _choosing(ctx, original))
    if device == "npu":
        reg.replace_when_imported("deepspeed.cann_path", "deepspeed.ops.op_builder.npu.builder", "NPUOpBuilder",
                                  "installed_cann_path", _cann_path)


# ------------------------------------------------------------------ the accelerator

def _choosing(ctx, original):
    """``get_accelerator`` that makes the first choice for the target (see the module docstring)."""
    module = sys.modules[_REAL]

    def get_accelerator():
        if module.ds_accelerator is None and "DS_ACCELERATOR" not in os.environ:
            module.set_accelerator(accelerator_for(ctx))
        return original()

    get_accelerator.__wrapped__ = original
    get_accelerator.__doc__ = original.__doc__
    return get_accelerator


def accelerator_for(ctx):
    """The DeepSpeed accelerator for a target without one of DeepSpeed's vendor accelerators."""
    logger.info("transfer: DeepSpeed uses its CUDA accelerator on %s devices (%s)", ctx.profile.device_type,
                ctx.profile.backend)
    return target_accelerator(ctx.profile.device_type, ctx.profile.backend, indexed=not ctx.profile.is_cpu)


def target_accelerator(device_type: str, backend: str, indexed: bool = True):
    """DeepSpeed's CUDA accelerator naming `device_type` devices and the `backend` collectives.

    torch.cuda calls DeepSpeed makes through it already reach the target (transfer's
    cuda_namespace, the cpu runtime on the cpu target); what changes is every answer that names a
    device or a backend, so that DeepSpeed compares like with like (``p.device ==
    torch.device(current_device_name())``), and the FusedAdam op builder, whose CUDA kernel is
    served (`FusedAdamOp`). `indexed` False (the cpu target): names carry no index, as host
    tensors' devices carry none (``torch.device('cpu:1') != torch.device('cpu')``).
    """
    import torch
    from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator

    def name(index):
        return device_type if index is None or not indexed else f"{device_type}:{index}"

    class TargetAccelerator(CUDA_Accelerator):
        def __init__(self):
            super().__init__()
            self._name = device_type
            self._communication_backend_name = backend

        def device_name(self, device_index=None):
            return name(device_index)

        def device(self, device_index=None):
            return torch.device(name(device_index))

        def current_device_name(self):
            return name(torch.cuda.current_device())

        def on_accelerator(self, tensor):
            return tensor.device.type == device_type

        def _lazy_init_class_dict(self):
            if self.class_dict is None:
                super()._lazy_init_class_dict()
                self.class_dict["FusedAdamBuilder"] = served_fused_adam_builder()

    return TargetAccelerator()


class FusedAdamOp:
    """The op module DeepSpeed's FusedAdamBuilder builds (csrc/adam/multi_tensor_adam.cu), served.

    ``multi_tensor_adam(chunk_size, noop_flag, [grads, params, exp_avgs, exp_avg_sqs], lr, beta1,
    beta2, epsilon, step, mode, bias_correction, weight_decay)``: DeepSpeed's AdamFunctor, adapted
    from apex's and computing the same (mode 1: decoupled weight decay p -= lr*(m_hat/(sqrt(v_hat)+eps)
    + wd*p); mode 0: g += wd*p first; float32 math, each list stored in its own dtype; the flag is
    ignored, as the kernel does): apex's amp_C.multi_tensor_adam, transfer/dropins/amp_C.py.
    """

    @staticmethod
    def multi_tensor_adam(chunk_size, noop_flag, tensor_lists, lr, beta1, beta2, epsilon, step, mode,
                          bias_correction, weight_decay):
        from ..dropins import amp_C

        amp_C.multi_tensor_adam(chunk_size, noop_flag, tensor_lists, lr, beta1, beta2, epsilon, step, mode,
                                bias_correction, weight_decay)


def served_fused_adam_builder():
    """DeepSpeed's FusedAdamBuilder whose load() returns `FusedAdamOp` instead of compiling CUDA."""
    from deepspeed.ops.op_builder.fused_adam import FusedAdamBuilder

    class ServedFusedAdamBuilder(FusedAdamBuilder):
        def is_compatible(self, verbose=False):
            return True

        def load(self, verbose=True):
            return FusedAdamOp

    ServedFusedAdamBuilder.__name__ = ServedFusedAdamBuilder.__qualname__ = "FusedAdamBuilder"
    return ServedFusedAdamBuilder


# ------------------------------------------------------------------ npu: CANN's environment

def _cann_path(original):
    def installed_cann_path(self):
        if not os.environ.get("ASCEND_HOME_PATH"):
            raise CannNotSourced(
                f"DeepSpeed's NPU op builder {getattr(self, 'name', '')!r} needs CANN's environment: "
                "ASCEND_HOME_PATH is not set. Source CANN's set_env.sh before launching (for example "
                "`source /usr/local/Ascend/ascend-toolkit/set_env.sh`, or set_env.sh of your CANN install), "
                "as on every Ascend host.")
        return original(self)

    installed_cann_path.__wrapped__ = original
    return installed_cann_path

"""``Adam(fused=True)`` / ``AdamW(fused=True)`` on the cpu target where torch's CPU has no fused kernel.

nanoGPT (``configure_optimizers``) and llm.c's train_gpt2.py ask for ``AdamW(..., fused=True)`` when
the device type is ``'cuda'``, which on the cpu target it is. torch 2.4 and later have CPU kernels for
``aten::_fused_adam_`` / ``aten::_fused_adamw_`` and run them; torch 2.0-2.3 have CUDA kernels only,
and their constructors refuse CPU parameters ("`fused=True` requires all the params to be ... CUDA" /
"... of supported devices: ['cuda', ...]"). There this area, on the cpu target only:

* registers `transfer.cpu.kernels.register_fused_adam` (CUDA's kernel, ``fused_adam_utils.cuh``, for
  every overload torch's optimizer calls: float or Tensor lr, GradScaler's grad_scale / found_inf,
  amsgrad, maximize), removed again on uninstall;
* lets the constructors' check accept CPU parameters: torch 2.1-2.3 ask
  ``_get_fused_kernels_supported_devices()``, imported by name into ``torch.optim.adam`` and
  ``torch.optim.adamw``; those two names answer with ``'cpu'`` added. torch 2.0 reads ``p.is_cuda``
  (`torch_sites.CPU_KERNEL_SITES`): the torch_is_cuda area, applied after this one, leaves that read to
  the target's getter while the kernel is registered.

Vendor targets: the plug-in registers (or lacks) its own fused kernels; nothing changes there.
"""

from __future__ import annotations

import importlib


def apply(ctx) -> None:
    if ctx.cpu is None:
        return
    reg = ctx.registry
    if not reg.enabled("optim.fused_kernels"):
        return
    from ..cpu import kernels as cpu_kernels

    library = cpu_kernels.register_fused_adam()
    if library is None:  # torch >= 2.4: its own CPU kernels, accepted by its own check
        return
    reg.on_revert("optim.fused_kernels", lambda: cpu_kernels.destroy(library))
    for name, module in (("optim.fused_devices_adam", "torch.optim.adam"),
                         ("optim.fused_devices_adamw", "torch.optim.adamw")):
        module = importlib.import_module(module)  # torch < 2.2's torch.optim deletes its submodules' names
        native = getattr(module, "_get_fused_kernels_supported_devices", None)
        if native is not None:  # torch 2.1-2.3 (2.0 reads p.is_cuda: see the module docstring)
            reg.replace(name, module, "_get_fused_kernels_supported_devices", _with_cpu(native))


def _with_cpu(native):
    def _get_fused_kernels_supported_devices():
        """torch's list of device types with fused optimizer kernels, and 'cpu' (transfer.cpu.kernels)."""
        return [*native(), "cpu"]

    _get_fused_kernels_supported_devices.__wrapped__ = native
    return _get_fused_kernels_supported_devices

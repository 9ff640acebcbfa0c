"""Custom operators registered for CUDA run on the target; CUDA C++ builds fail clearly.

Contract:

* Every ``torch.library`` registration funnels into ``Library.impl(op, fn, key)``:
  ``torch.library.impl("ns::op", "cuda")``, ``register_kernel(op, "cuda")``,
  ``@custom_op(..., device_types="cuda")``, ``Library(ns, "IMPL", "CUDA").impl(...)``,
  the legacy ``torch.library.impl(lib, name, "CUDA")``. When the key is one of
  CUDA's (`CUDA_KEYS`: ``CUDA``, ``AutogradCUDA``, ``AutocastCUDA``, ...), the
  registration happens as written and `fn` is also registered for the target's
  key (the profile's `dispatch_key`: ``CPU``/``AutogradCPU``... on the cpu target, ``PrivateUse1``/
  ``AutogradPrivateUse1``... on a plug-in vendor, ``XPU``/``AutogradXPU``... on xpu) in a ``torch.library.Library`` of
  transfer's own, one per (op, key), destroyed on uninstall.
* A kernel the script (or a library) registers natively for the target key
  wins: the translated one is not registered when the target key already has
  a kernel for the op, and is destroyed first when the script registers one
  later. ``register_fake`` / ``register_autograd`` are device-independent and
  need nothing.
* A CUDA kernel registered for one of torch's own operators (namespace ``aten``,
  and ``_native``, which carries torch 2.14's Triton/CuTe DSL overrides of aten
  ops) is an override of torch's CUDA implementation, not a new operator: it is
  registered as written and never for the target, whose own kernel (or the
  plug-in's fallback) computes the op. torch 2.14's CUDA build installs such
  overrides at ``import torch`` (``torch._native``: ``aten::bmm`` for outer
  products when Triton is importable), routers whose fallback is the CUDA kernel:
  registered for ``PrivateUse1`` they ran the CUDA kernel on the vendor's tensors
  ("CUDAGuardImpl initialized with non-CUDA DeviceType: npu" from every
  ``matmul``/``scaled_dot_product_attention`` on a plug-in without its own ``bmm``).
* ``torch.library.register_autocast(op, "cuda", ...)`` registers for the
  target's device type.
* ``torch.utils.cpp_extension``: ``CUDAExtension``, and ``load`` /
  ``load_inline`` of CUDA sources (``.cu``/``.cuh`` files, ``cuda_sources``,
  ``with_cuda=True``) raise `UnsupportedCudaAPI` naming the files and what the
  target offers instead (``Profile.custom_kernels``), before any compiler
  runs. Patched when the script imports ``torch.utils.cpp_extension`` (it
  imports setuptools: not at install).
"""

from __future__ import annotations

import inspect
import logging
import threading
from typing import Any, Dict, Tuple

import torch
import torch.library

from ..errors import UnsupportedCudaAPI

logger = logging.getLogger("transfer")

#: CUDA's dispatch keys and the part that names the backend: "AutogradCUDA" -> "Autograd" + target key.
CUDA_KEYS = {"CUDA": "", "AutogradCUDA": "Autograd", "AutocastCUDA": "Autocast", "SparseCUDA": "Sparse",
             "SparseCsrCUDA": "SparseCsr", "QuantizedCUDA": "Quantized", "NestedTensorCUDA": "NestedTensor"}
_CUDA_SUFFIXES = (".cu", ".cuh")
#: torch's own operator namespaces: a CUDA kernel registered there overrides torch's CUDA implementation.
TORCH_NAMESPACES = ("aten", "_native")


def target_key(profile, cuda_key: str):
    """The target's dispatch key standing for `cuda_key`, or None when torch has no such key."""
    name = CUDA_KEYS[cuda_key] + profile.dispatch_key
    return name if hasattr(torch._C.DispatchKey, name) else None


def apply(ctx) -> None:
    _translate_library_impl(ctx)
    _translate_register_autocast(ctx)
    _refuse_cuda_builds(ctx)


# ------------------------------------------------------------------ torch.library

class _Translated:
    """transfer's own libraries holding the translated registrations, one per (op, key)."""

    def __init__(self):
        self.libraries: Dict[Tuple[str, str], Any] = {}
        self.lock = threading.Lock()

    def destroy(self, qualname: str, key: str) -> None:
        from ..cpu.kernels import destroy

        with self.lock:
            lib = self.libraries.pop((qualname, key), None)
        if lib is not None:
            destroy(lib)

    def destroy_all(self) -> None:
        with self.lock:
            pairs = list(self.libraries)
        for qualname, key in pairs:
            self.destroy(qualname, key)


def _op_name(lib, op_name) -> str:
    """"ns::op[.overload]" as Library.impl names it."""
    if isinstance(op_name, str):
        name = op_name
    else:  # an OpOverload
        name = op_name._schema.name
        if op_name._overloadname != "default":
            name += "." + op_name._overloadname
    return name if "::" in name else f"{lib.ns}::{name}"


def _has_kernel(qualname: str, key: str) -> bool:
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key)
    except RuntimeError:  # the op is not defined (yet): nothing registered for it
        return False


def _translate_library_impl(ctx) -> None:
    translated = _Translated()
    reg = ctx.registry
    if not reg.enabled("custom_ops.library_impl"):
        return
    reg.on_revert("custom_ops.translated_libraries", translated.destroy_all)
    device = ctx.profile.device_type
    own_impl = torch.library.Library.impl  # the original, for transfer's own libraries

    def impl(wrapped, lib, args, kwargs):
        if lib is None:
            return wrapped(*args, **kwargs)
        bound = dict(zip(("op_name", "fn", "dispatch_key"), args))
        bound.update(kwargs)
        key = bound.get("dispatch_key") or lib.dispatch_key
        qualname = _op_name(lib, bound["op_name"])
        if key in CUDA_KEYS and qualname.split("::", 1)[0] in TORCH_NAMESPACES:
            logger.debug("transfer: %s kernel of torch's own %s stays CUDA's; %s computes it with its own",
                         key, qualname, device)
            return wrapped(*args, **kwargs)
        if key not in CUDA_KEYS:
            if (qualname, key) in translated.libraries:  # the script registers natively: its kernel wins
                translated.destroy(qualname, key)
            return wrapped(*args, **kwargs)
        result = wrapped(*args, **kwargs)
        to = target_key(ctx.profile, key)
        if to is None:
            logger.warning("transfer: %s registered for %s has no %s equivalent in torch %s; not registered there",
                           qualname, key, device, torch.__version__)
        elif _has_kernel(qualname, to):
            logger.debug("transfer: %s already has a %s kernel; its %s kernel is not registered there",
                         qualname, to, key)
        else:
            namespace = qualname.split("::", 1)[0]
            own = torch.library.Library(namespace, "IMPL")
            extra = {k: v for k, v in bound.items() if k not in ("op_name", "fn", "dispatch_key")}
            own_impl(own, bound["op_name"], bound["fn"], to, **extra)
            with translated.lock:
                translated.libraries[(qualname, to)] = own
            logger.debug("transfer: %s kernel of %s registered for %s", key, qualname, to)
        return result

    reg.wrap("custom_ops.library_impl", torch.library.Library, "impl", impl)


def _translate_register_autocast(ctx) -> None:
    if not hasattr(torch.library, "register_autocast"):  # torch < 2.5
        return
    device = ctx.profile.device_type

    def register_autocast(wrapped, instance, args, kwargs):
        if len(args) > 1 and args[1] == "cuda":
            args = (args[0], device) + tuple(args[2:])
        elif kwargs.get("device_type") == "cuda":
            kwargs["device_type"] = device
        return wrapped(*args, **kwargs)

    ctx.registry.wrap("custom_ops.register_autocast", torch.library, "register_autocast", register_autocast)


# ------------------------------------------------------------------ cpp_extension

def cuda_build_error(ctx, api: str, what: str) -> UnsupportedCudaAPI:
    p = ctx.profile
    where = "the cpu target" if p.is_cpu else f"{p.vendor} ({p.device_type})"
    return UnsupportedCudaAPI(
        f"{api}: cannot build {what}: CUDA C++ kernels (nvcc) do not run on {where}. "
        f"What it offers instead: {p.custom_kernels}. Or write the op with torch operations and register it "
        f"with torch.library for 'CUDA' (transfer registers such kernels for {p.device_type}); "
        "TRANSFER_DEVICE=off builds it as on a CUDA machine.")


def _cuda_files(sources) -> list:
    if isinstance(sources, str):
        sources = [sources]
    return [str(s) for s in (sources or ()) if str(s).endswith(_CUDA_SUFFIXES)]


def _refuse_cuda_builds(ctx) -> None:
    module = "torch.utils.cpp_extension"

    def guarded(api: str, check):
        def make(original):
            signature = inspect.signature(original)

            def build(*args, **kwargs):
                try:
                    bound = signature.bind(*args, **kwargs)
                except TypeError:
                    return original(*args, **kwargs)  # torch's own error for a bad call
                what = check(bound.arguments)
                if what:
                    raise cuda_build_error(ctx, f"torch.utils.cpp_extension.{api}", what)
                return original(*args, **kwargs)

            build.__name__ = api
            build.__wrapped__ = original
            return build

        ctx.registry.replace_when_imported(f"custom_ops.cpp_extension_{api}", module, "", api, make)

    def load(a):
        files = _cuda_files(a.get("sources"))
        if files:
            return f"the CUDA sources {', '.join(files)} of extension {a.get('name')!r}"
        if a.get("with_cuda"):
            return f"extension {a.get('name')!r} with with_cuda=True (it links the CUDA runtime)"
        return ""

    def load_inline(a):
        if a.get("cuda_sources"):
            return f"the cuda_sources (inline CUDA code) of extension {a.get('name')!r}"
        if a.get("with_cuda"):
            return f"extension {a.get('name')!r} with with_cuda=True (it links the CUDA runtime)"
        return ""

    def cuda_extension(a):
        files = _cuda_files(a.get("sources"))
        listed = f": CUDA sources {', '.join(files)}" if files else " (it links the CUDA runtime)"
        return f"CUDAExtension {a.get('name')!r}{listed}"

    guarded("load", load)
    guarded("load_inline", load_inline)
    guarded("CUDAExtension", cuda_extension)

"""torch.compile: traced code sees the same `x.is_cuda` as eager code, and every mode compiles.

Dynamo does not read the Tensor.is_cuda descriptor while tracing; it answers
``device.type == "cuda"`` from the tensor's metadata, so a compiled
``if x.is_cuda:`` took the other branch than eager under the shim. torch
imports dynamo lazily (~1 s), so the patch waits for that import.

``mode="reduce-overhead"`` (CUDA graphs): inductor asks whether CUDA's caching
allocator is enabled once ``torch.cuda.is_available()`` is True, through
``torch._C._cuda_cudaCachingAllocator_is_enabled``, which a CPU build of torch
(the one torch_npu and the cpu target run on) does not have: an AttributeError
inside torch.compile. Where it is missing there is no CUDA allocator to ask;
inductor then skips CUDA graphs for the target's non-CUDA nodes, as it does
natively for CPU tensors, and the compiled model computes what eager does.

The C stand-ins of the hot wrappers (transfer/fastcalls.py) are opaque to
dynamo, a graph break each. Dynamo is shown the Python closure each stands in
for instead, at the source ``<where the stand-in is>.__transfer_python__``, so
it traces (and guards on) exactly what it traced before the C path existed.

``torch.compile`` / ``torch._dynamo.optimize`` asking for inductor or CUDA graphs get, per graph, the
target's own compiler where the installed plug-in registers one, else a backend that runs on the target,
said once per call site (`compile_policy`; the target's `profiles.CompilePolicy`).
"""

from __future__ import annotations

import sys

import torch

from .. import fastcalls, frames


def apply(ctx) -> None:
    # The cpu target answers is_cuda for CPU tensors, like its eager descriptor.
    device_type = ctx.profile.device_type

    def make_replacement(original):
        def method_attr_is_cuda(self, tx):
            if self.device is None:
                return original(self, tx)
            from torch._dynamo.variables import base, constant

            answer = self.device.type == device_type
            if hasattr(base.VariableTracker, "build"):
                return base.VariableTracker.build(tx, answer)
            return constant.ConstantVariable.create(answer)  # torch < 2.5

        method_attr_is_cuda.__wrapped__ = original
        return method_attr_is_cuda

    ctx.registry.replace_when_imported("dynamo.is_cuda", "torch._dynamo.variables.tensor", "TensorVariable",
                                       "method_attr_is_cuda", make_replacement)

    def make_getattr_replacement(original):
        from torch._dynamo.variables import tensor

        if hasattr(tensor.TensorVariable, "method_attr_is_cuda"):
            return None  # the patch above covers it

        def var_getattr(self, tx, name):
            if name != "is_cuda" or self.device is None:
                return original(self, tx, name)
            from torch._dynamo.variables import base, constant

            return constant.ConstantVariable(self.device.type == device_type, **base.VariableTracker.propagate(self))

        var_getattr.__wrapped__ = original
        return var_getattr

    # torch < 2.2 answers is_cuda inside TensorVariable.var_getattr (no method_attr_is_cuda).
    ctx.registry.replace_when_imported("dynamo.is_cuda", "torch._dynamo.variables.tensor", "TensorVariable",
                                       "var_getattr", make_getattr_replacement)

    def make_allocator_check(original):
        if hasattr(torch._C, "_cuda_cudaCachingAllocator_is_enabled"):
            return None  # a CUDA build: torch's own check answers

        def check_caching_allocator_for_cudagraphs():
            return None  # no CUDA caching allocator on this build: nothing to skip for

        check_caching_allocator_for_cudagraphs.__wrapped__ = original
        return check_caching_allocator_for_cudagraphs

    # torch >= 2.13 checks the allocator before CUDA graphs (older torch has no such function: left alone).
    ctx.registry.replace_when_imported("dynamo.cudagraph_allocator_check", "torch._inductor.cudagraph_utils", "",
                                       "check_caching_allocator_for_cudagraphs", make_allocator_check)

    target = ctx.profile.name

    def make_triton_check(original):
        def raise_if_triton_unavailable(device=None):
            from torch._dynamo.exc import TritonUnavailableError

            raise TritonUnavailableError(f"torch.cuda runs on the {target} target here, not on an NVIDIA GPU: "
                                         "triton's CUDA backend has no GPU to run on")

        raise_if_triton_unavailable.__wrapped__ = original
        return staticmethod(raise_if_triton_unavailable)

    # torch 2.14's has_triton() asks each registered device interface; CUDA's answers is_available() True here,
    # and triton's NVIDIA driver then asserts that libcuda exists, so inductor failed on a CUDA build of torch
    # without a GPU (the usual laptop). CUDA's interface says what it says natively on such a machine: no triton.
    # Older torch has no such method (it reads the capability, which triton never reaches): left alone.
    ctx.registry.replace_when_imported("dynamo.cuda_triton", "torch._dynamo.device_interface", "CudaInterface",
                                       "raise_if_triton_unavailable", make_triton_check)

    # Triton >= 3's NVIDIA and AMD drivers count as active when torch.cuda.is_available() (triton/backends/
    # */driver.py), and torch >= 2.5's has_triton() asks CUDA's device interface the same: both read the
    # target's True, so inductor reached triton's NVIDIA driver, which asserts that libcuda exists ("libcuda.so
    # cannot found!") wherever triton is installed over a build without CUDA (the cpu target). No triton CUDA
    # kernel can run where transfer is active: both get the build's own answer (False without CUDA).
    native_is_available = ctx.registry.get_original(torch.cuda, "is_available")

    def make_native_check(original):
        def is_available():
            return native_is_available()

        is_available.__wrapped__ = original
        return staticmethod(is_available)

    ctx.registry.replace_when_imported("dynamo.cuda_interface_available", "torch._dynamo.device_interface",
                                       "CudaInterface", "is_available", make_native_check)
    for backend, cls in (("nvidia", "CudaDriver"), ("amd", "HIPDriver")):
        ctx.registry.replace_when_imported(f"dynamo.triton_{backend}_driver", f"triton.backends.{backend}.driver",
                                           cls, "is_active", make_native_check)

    def make_optimize(original):
        return _policy_optimize(ctx, original)

    # torch.compile calls torch._dynamo.optimize (torch 2.0-2.14), as scripts do themselves.
    ctx.registry.replace_when_imported("dynamo.compile_policy", "torch._dynamo", "", "optimize", make_optimize)

    if fastcalls.enabled():
        ctx.registry.replace_when_imported("dynamo.fastcalls", "torch._dynamo.variables.builder", "VariableBuilder",
                                           "_wrap", _traced_as_python)


def _policy_optimize(ctx, original):
    """torch._dynamo.optimize whose inductor / cudagraphs backend becomes a `compile_policy.TargetCompiler`."""
    from . import compile_policy

    def optimize(*args, **kwargs):
        backend = kwargs["backend"] if "backend" in kwargs else (args[0] if args else "inductor")
        kind = compile_policy.kind_of(backend)
        if kind is not None:
            # the script's torch.compile / optimize line, past wrappers a library bound over torch.compile
            frame = frames.user_frame(sys._getframe(1), wrapping=torch.compile)
            site = None if frame is None else compile_policy.Site(frame.f_code.co_filename, frame.f_lineno)
            options = {"backend": kind}
            mode = _mode_of(backend)
            if mode:
                options["mode"] = mode
            if kwargs.get("nopython"):
                options["fullgraph"] = True
            if kwargs.get("dynamic"):
                options["dynamic"] = True
            policy = compile_policy.TargetCompiler(backend, kind, ctx, site, options)
            if "backend" in kwargs or not args:
                kwargs["backend"] = policy
            else:
                args = (policy,) + tuple(args[1:])
        return original(*args, **kwargs)

    optimize.__wrapped__ = original
    optimize.__doc__ = original.__doc__
    return optimize


def _mode_of(backend):
    """torch.compile's mode, as far as its inductor wrapper's config shows it (None: default)."""
    config = getattr(backend, "config", None)
    if not isinstance(config, dict):
        return None
    if config.get("triton.cudagraphs"):
        return "reduce-overhead" if not config.get("max_autotune") else "max-autotune"
    if config.get("max_autotune"):
        return "max-autotune-no-cudagraphs"
    return None


def _traced_as_python(original):
    """VariableBuilder._wrap (torch 2.0-2.14) that builds a C stand-in's Python twin in its place."""
    from torch._dynamo.source import AttrSource

    def _wrap(self, value):
        if fastcalls.is_fast(value):
            twin = fastcalls.python_of(value)
            _same_rules(value, twin)
            if self.source is not None:
                self.source = AttrSource(self.source, "__transfer_python__")
            value = twin
        return original(self, value)

    _wrap.__wrapped__ = original
    return _wrap


def _same_rules(fast, twin) -> None:
    """Dynamo's table of torch functions, built by name at the first compile, holds whatever
    ``torch.zeros`` was then: the stand-in when transfer was installed. The twin gets its rule
    (a function put in the graph as is, as the Python wrapper was before the C path)."""
    _same_folding(fast, twin)
    try:
        from torch._dynamo import trace_rules

        rules = trace_rules.get_torch_obj_rule_map()
    except (ImportError, AttributeError):  # torch < 2.2: a set of allowed ids (allowed_functions)
        from torch._dynamo import allowed_functions

        ids = allowed_functions._allowed_function_ids
        if id(fast) in ids and id(twin) not in ids:
            ids.add(id(twin))
        return
    if fast in rules and twin not in rules:
        rules[twin] = rules[fast]


def _same_folding(fast, twin) -> None:
    """Dynamo's lists of functions it folds to a constant at trace time (``torch.cuda.current_device``
    among them, built when dynamo is first imported: the stand-in, where transfer was installed) get the
    twin beside the stand-in, so the call folds as it did before the C path (no graph break)."""
    try:
        from torch._dynamo.variables import torch as torch_variables
    except ImportError:
        return
    for name in ("constant_fold_functions", "constant_fold_functions_need_guards"):
        folded = getattr(torch_variables, name, None)  # None: absent on this torch
        if folded is None or fast not in folded or twin in folded:
            continue
        if isinstance(folded, dict):
            folded[twin] = folded[fast]
        elif isinstance(folded, set):
            folded.add(twin)
        elif isinstance(folded, list):
            folded.append(twin)

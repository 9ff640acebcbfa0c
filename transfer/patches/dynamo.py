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
"""

from __future__ import annotations

import torch


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

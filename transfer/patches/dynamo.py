"""torch.compile: traced code sees the same `x.is_cuda` as eager code.

Dynamo does not read the Tensor.is_cuda descriptor while tracing; it answers
``device.type == "cuda"`` from the tensor's metadata, so a compiled
``if x.is_cuda:`` took the other branch than eager under the shim. torch
imports dynamo lazily (~1 s), so the patch waits for that import.
"""

from __future__ import annotations


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

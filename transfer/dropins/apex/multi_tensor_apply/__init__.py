"""apex.multi_tensor_apply, provided by transfer.

``multi_tensor_applier(op, noop_flag_buffer, tensor_lists, *args)`` calls
``op(chunk_size, noop_flag_buffer, tensor_lists, *args)`` with apex's chunk
size (2048 * 32); the ops are transfer's ``amp_C`` (torch foreach ops).
``available`` is True: the ops run on the target.
"""

from .multi_tensor_apply import MultiTensorApply

multi_tensor_applier = MultiTensorApply(2048 * 32)

__all__ = ["MultiTensorApply", "multi_tensor_applier"]

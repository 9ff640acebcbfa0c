"""apex.multi_tensor_apply.multi_tensor_apply, provided by transfer."""


class MultiTensorApply(object):
    """Calls an amp_C op with the chunk size given at construction (apex's interface)."""

    available = True
    warned = False

    def __init__(self, chunk_size):
        self.chunk_size = chunk_size

    def check_avail(self):
        pass  # transfer's amp_C is always there while apex is served

    def __call__(self, op, noop_flag_buffer, tensor_lists, *args):
        return op(self.chunk_size, noop_flag_buffer, tensor_lists, *args)

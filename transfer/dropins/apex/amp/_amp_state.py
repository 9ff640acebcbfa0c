"""apex.amp._amp_state: the state amp.initialize sets up (apex's "header object")."""

import torch


class AmpState(object):
    def __init__(self):
        self.hard_override = False
        self.allow_incoming_model_not_fp32 = False
        self.verbosity = 1


_amp_state = AmpState()


def warn_or_err(msg):
    if _amp_state.hard_override:
        print("Warning:  " + msg)
    else:
        raise RuntimeError(msg)


def maybe_print(msg, rank0=False):
    distributed = (torch.distributed.is_available() and torch.distributed.is_initialized()
                   and torch.distributed.get_world_size() > 1)
    if _amp_state.verbosity > 0:
        if rank0 and distributed:
            if torch.distributed.get_rank() == 0:
                print(msg)
        else:
            print(msg)


def master_params(optimizer):
    """The parameters `optimizer` updates: after amp.initialize with master weights (O2), the float32
    masters (once the first scale_loss created them), else the model's own."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            yield p

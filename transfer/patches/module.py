"""nn.Module.to / .to_empty. (Module.cuda needs no patch: it calls Tensor.cuda.)"""

from __future__ import annotations

import torch

from ._calls import _finish, device_first, device_keyword


def apply(ctx) -> None:
    Module = torch.nn.Module
    if ctx.profile.is_cpu:
        to = _cuda_preserving_to(ctx, Module.to)
    else:
        # Translating once here spares one cache lookup per parameter in _apply.
        to = device_first(ctx, "Module.to", Module.to, to_signature=True)
    ctx.registry.replace("module.to", Module, "to", to)
    ctx.registry.replace("module.to_empty", Module, "to_empty",
                         device_keyword(ctx, "Module.to_empty", Module.to_empty))


def _cuda_preserving_to(ctx, original):
    """Module.to on the cpu target: the device stays a CUDA device for Tensor.to.

    Each tensor's ``t.to(device)`` then copies (patches/_calls.py, `copy_moves`),
    as a host-to-device move does on CUDA: ``param.data`` becomes a copy, the
    Parameter objects stay. The argument is still checked (a bad ordinal raises)
    and recorded; an int ordinal becomes ``torch.device('cuda', N)``, which
    torch's own argument parser accepts on every build.
    """
    translate = ctx.target.translator("Module.to")
    from ..devices import DEVICE_SPEC_TYPES, parse_cuda

    as_cuda = {}  # argument -> the torch.device('cuda', N) passed on

    def cuda_form(spec):
        if type(spec) not in DEVICE_SPEC_TYPES:
            return spec
        device = as_cuda.get(spec)
        if device is None:
            translate(spec)  # checks the ordinal, records the translation
            parsed = parse_cuda(spec)
            if parsed is None:
                return spec  # not a CUDA device: 'cpu', 'meta', ...
            index = parsed[0]
            device = torch.device("cuda") if index is None else torch.device("cuda", index)
            if len(as_cuda) < 512:
                as_cuda[spec] = device
        return device

    def to(self, *args, **kwargs):
        if args:
            args = (cuda_form(args[0]),) + args[1:]
        if kwargs.get("device") is not None:
            kwargs["device"] = cuda_form(kwargs["device"])
        return original(self, *args, **kwargs)

    return _finish(to, original, "to")

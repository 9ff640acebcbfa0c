"""torch.load: checkpoints saved on CUDA, through torch's own location hooks.

torch restores every storage it loads by its location tag (``'cuda:0'``, or
what ``map_location`` maps it to) through ``torch.serialization``'s package
registry (`register_package`, read by `default_restore_location`; the same
in torch 2.0-2.14, for the zip and the legacy format, with ``weights_only``
and ``mmap``). This area registers one deserializer there, ahead of CUDA's
own: a location torch parses as a CUDA device lands on the target device (an
ordinal the target lacks raises when a storage is placed, as on CUDA), and is
recorded for `transfer.report()`. Every ``map_location`` form then behaves as
natively, because torch.load runs as it is:

* None, a dict (``{'cuda:1': 'cuda:0'}``), a callable (returning None, or a
  storage: ``lambda s, loc: s.cuda(rank)`` uses the ``Storage.cuda`` below):
  passed to torch unchanged. A dict gains, for each CUDA key, the same entry
  under the target's location (``'npu:1'``), for checkpoints saved under
  transfer on a vendor;
* a CUDA string or ``torch.device``: the target device, which torch hands to
  the paths that take no location hooks (``.safetensors`` files, loaded by
  torch 2.13+ through safetensors; TorchScript archives, through
  torch.jit.load). An invalid ordinal is left for the hook to raise lazily.

``torch.load('model.safetensors')`` therefore works as natively (torch refuses
a callable map_location for safetensors, which transfer no longer passes).
Only the *locations* are translated; the file argument is never looked at, so
'/ckpt/cuda_model.pt' stays what it is. Uninstall removes the registration.
"""

from __future__ import annotations

import torch
import torch.serialization

from ..devices import InvalidDeviceError, parse_cuda

#: torch registers CUDA's tagger/deserializer at this priority (torch 2.0-2.14); ours goes just before it.
_CUDA_PRIORITY = 20


def apply(ctx) -> None:
    reg = ctx.registry
    if reg.enabled("serialization.locations"):
        entry = _register_locations(ctx)
        reg.on_revert("serialization.locations", lambda: _unregister(entry))
    translate = ctx.target.translator("torch.load(map_location)")

    def load(wrapped, instance, args, kwargs):
        if len(args) > 1:
            args = (args[0], _map_location(args[1], translate)) + tuple(args[2:])
        elif kwargs.get("map_location") is not None:
            kwargs["map_location"] = _map_location(kwargs["map_location"], translate)
        return wrapped(*args, **kwargs)

    reg.wrap("serialization.load", torch, "load", load)
    for storage_class in (torch.UntypedStorage, torch.TypedStorage):
        reg.replace(f"serialization.{storage_class.__name__}.cuda", storage_class, "cuda",
                    _storage_cuda(ctx, storage_class.cuda))


def _register_locations(ctx) -> tuple:
    """Register the CUDA-location deserializer; returns the registry entry (for `_unregister`)."""
    record = ctx.target.translator("torch.load(checkpoint location)")

    def tag(storage):
        return None  # saving is untouched: storages on the target keep the target's tag

    def restore(storage, location):
        if parse_cuda(location) is None:
            return None  # not a CUDA location, or one torch rejects: torch's own deserializers decide
        device = record(location)  # InvalidDeviceError (a RuntimeError) for an ordinal the target lacks
        if device.type == "cpu":
            return storage  # loaded storages start on the CPU
        return torch.serialization.default_restore_location(storage, str(device))

    used = {item[0] for item in torch.serialization._package_registry}
    priority = _CUDA_PRIORITY - 1
    while priority in used:  # equal priorities would make torch sort by comparing functions
        priority -= 1
    torch.serialization.register_package(priority, tag, restore)
    return next(item for item in torch.serialization._package_registry if item[2] is restore)


def _unregister(entry: tuple) -> None:
    registry = torch.serialization._package_registry
    for i, item in enumerate(registry):
        if item is entry:
            del registry[i]
            return


def _map_location(map_location, translate):
    if isinstance(map_location, (str, torch.device)):  # an int is no map_location for torch.load, on CUDA either
        try:
            return translate(map_location)
        except InvalidDeviceError:
            return map_location  # as on CUDA: the location hook raises when a storage is placed
    if isinstance(map_location, dict):
        # Keys are the locations saved in the file ('cuda:0', or 'npu:0' for a
        # checkpoint written under transfer); values where to put them, which
        # torch resolves through the location hook.
        table = dict(map_location)
        for key, value in map_location.items():
            if parse_cuda(key) is not None:
                try:
                    table.setdefault(str(translate(key)), value)
                except InvalidDeviceError:
                    pass  # no storage can carry a tag the target lacks
        return table
    return map_location  # a callable, or what torch itself rejects


def _storage_cuda(ctx, native):
    """storage.cuda(device): the idiom ``map_location=lambda s, loc: s.cuda(rank)``.

    A CUDA ordinal (or device) goes to the target device; anything else goes to
    torch's own method, which raises for it as on CUDA."""
    translate = ctx.target.translator("Storage.cuda")

    def cuda(self, device=None, non_blocking=False):
        spec = "cuda" if device is None else device
        target = translate(spec)
        if target is spec:  # not a CUDA device
            return native(self, device, non_blocking)
        if target.type == "cpu":
            return self
        return self.to(device=target, non_blocking=non_blocking)

    cuda.__wrapped__ = native
    return cuda

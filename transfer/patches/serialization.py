"""torch.load: map_location in every form, and checkpoints saved on CUDA.

Only the *locations* are translated ('cuda:0' -> 'npu:0'); the file argument is
never looked at, so '/ckpt/cuda_model.pt' stays what it is.
"""

from __future__ import annotations

import torch
import torch.serialization

from ..devices import InvalidDeviceError, parse_cuda


def apply(ctx) -> None:
    restore = _restorer(ctx)
    translate = ctx.target.translator("torch.load(map_location)")

    def load(wrapped, instance, args, kwargs):
        if len(args) > 1:
            args = (args[0], _map_location(args[1], restore, translate)) + tuple(args[2:])
        else:
            kwargs["map_location"] = _map_location(kwargs.get("map_location"), restore, translate)
        return wrapped(*args, **kwargs)

    ctx.registry.wrap("serialization.load", torch, "load", load)
    for storage_class in (torch.UntypedStorage, torch.TypedStorage):
        ctx.registry.replace(f"serialization.{storage_class.__name__}.cuda", storage_class, "cuda",
                             _storage_cuda(ctx))


def _restorer(ctx):
    """A map_location callable: CUDA locations go to the target, others stay."""
    target = ctx.target
    record = target.translator("torch.load(checkpoint location)")

    def restore(storage, location):
        if parse_cuda(location) is None:
            return None  # torch's default restore handles it
        device = record(location)
        if device.type == "cpu":
            return storage
        return torch.serialization.default_restore_location(storage, str(device))

    return restore


def _map_location(map_location, restore, translate):
    if map_location is None:
        return restore
    if isinstance(map_location, (str, torch.device)):  # an int is no map_location for torch.load, on CUDA either
        try:
            return translate(map_location)
        except InvalidDeviceError as exc:
            return _raising(exc)
    if isinstance(map_location, dict):
        # Keys are the locations saved in the file ('cuda:0', or 'npu:0' for a
        # checkpoint written under transfer); values where to put them.
        table = {str(k): v for k, v in map_location.items()}
        for key, value in list(table.items()):
            translated = translate(key)
            if translated is not key:
                table.setdefault(str(translated), value)

        def by_table(storage, location):
            return _place(storage, table.get(location, location), restore, translate)

        return by_table
    if callable(map_location):
        def by_user(storage, location):
            result = map_location(storage, location)
            if result is None:
                return restore(storage, location)
            if isinstance(result, (str, int, torch.device)):
                return _place(storage, result, restore, translate)
            return result

        return by_user
    return map_location


def _raising(error):
    def invalid(storage, location):  # as on CUDA: only a storage to place raises
        raise error

    return invalid


def _place(storage, location, restore, translate):
    device = translate(location)
    if isinstance(device, torch.device):
        if device.type == "cpu":
            return storage
        return torch.serialization.default_restore_location(storage, str(device))
    placed = restore(storage, location)
    return placed if placed is not None else torch.serialization.default_restore_location(storage, str(location))


def _storage_cuda(ctx):
    """storage.cuda(device): the idiom ``map_location=lambda s, loc: s.cuda(rank)``."""
    translate = ctx.target.translator("Storage.cuda")
    current = ctx.target.device(None)

    def cuda(self, device=None, non_blocking=False):
        device = current if device is None else translate(device)
        if device.type == "cpu":
            return self
        return self.to(device=device, non_blocking=non_blocking)

    return cuda

"""Copies bound before install: ``from torch.cuda import device_count`` -> the replacement.

A module imported before transfer installs that did ``from torch.cuda import
device_count, set_device`` (or ``from torch import zeros``) holds torch's
original objects: calls through them would run untranslated
(``device_count()`` 0 on a machine without CUDA, ``set_device`` failing deep
inside torch). This area rebinds each such copy to the replacement now on
the owner (`Registry.rebind_copies`: same name, same object), in every module
except torch's own (``torch``, ``functorch``, ``torchgen``: they keep
originals on purpose), transfer's and the vendor plug-ins'; uninstall puts
the originals back. `transfer.install` applies it last, after TRANSFER_LOG
wrapped the replacements, so a copy logs as the owner does.
``TRANSFER_DISABLE=copies`` turns it off.
"""

from __future__ import annotations

from ..profiles import PROFILES

AREA = "copies"
_OWN = __name__.rsplit(".", 2)[0]  # this copy of transfer, wherever it is imported from
_KEEP = frozenset({"torch", "functorch", "torchgen"} | {p.package for p in PROFILES.values() if p.package})


def apply(ctx) -> None:
    ctx.registry.rebind_copies(AREA, kept)


def kept(module_name: str) -> bool:
    """True for a module whose copies stay as they are: torch's own, transfer's, a vendor plug-in's."""
    return (module_name.split(".", 1)[0] in _KEEP or module_name == _OWN
            or module_name.startswith(_OWN + "."))

"""CUDA_VISIBLE_DEVICES and NCCL_* -> the target's variables.

The visible-devices variable is set before the vendor package is imported
(`set_visible_devices`, called by the selection), since vendor runtimes read
it when they initialise. A variable the user already set for the vendor wins;
every change is undone on uninstall. NCCL_* variables with no known equivalent
are listed in one warning (rank 0).
"""

from __future__ import annotations

import os
from typing import Callable


def set_visible_devices(registry, profile) -> Callable[[], None]:
    """Copy CUDA_VISIBLE_DEVICES to the profile's variable if that is unset; return the undo."""
    name = profile.visible_devices_env
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None or not name or name in os.environ or not registry.enabled("environment.visible_devices"):
        return lambda: None
    os.environ[name] = value

    def undo():
        os.environ.pop(name, None)

    registry.on_revert("environment.visible_devices", undo)
    return undo


def apply(ctx) -> None:
    profile = ctx.profile
    changes = {}
    visible = profile.visible_devices_env
    if visible and os.environ.get(visible) is not None and os.environ.get(visible) == os.environ.get("CUDA_VISIBLE_DEVICES"):
        ctx.env_changes[visible] = os.environ[visible]
    unknown = []
    for name, value in sorted(os.environ.items()):
        if not name.startswith("NCCL_"):
            continue
        rename = profile.nccl_env.get(name)
        if rename is None:
            unknown.append(name)
        elif rename.target not in os.environ:
            changes[rename.target] = rename.convert(value)
        elif os.environ[rename.target] == rename.convert(value):
            # Set by transfer in a parent process (torchrun's launcher, mp.spawn's parent):
            # in effect here too, so the report says so.
            ctx.env_changes[rename.target] = os.environ[rename.target]
    if not ctx.registry.enabled("environment.variables"):
        return
    for name, value in changes.items():
        os.environ[name] = value
    ctx.registry.on_revert("environment.variables", lambda: [os.environ.pop(n, None) for n in changes])
    ctx.env_changes.update(changes)
    if unknown and os.environ.get("RANK", "0") == "0":
        ctx.warn_once("NCCL_*", f"{', '.join(unknown)} {'has' if len(unknown) == 1 else 'have'} no "
                                f"equivalent for {profile.backend}; ignored")

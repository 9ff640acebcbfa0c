"""CUDA_VISIBLE_DEVICES and NCCL_* -> the target's variables.

Applied first, before the vendor runtime initialises its devices. A variable
the user already set for the vendor wins; every change is undone on uninstall.
NCCL_* variables with no known equivalent are listed in one warning (rank 0).
"""

from __future__ import annotations

import os


def apply(ctx) -> None:
    profile = ctx.profile
    changes = {}
    cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cuda_visible is not None and profile.visible_devices_env and profile.visible_devices_env not in os.environ:
        changes[profile.visible_devices_env] = cuda_visible
    unknown = []
    for name, value in sorted(os.environ.items()):
        if not name.startswith("NCCL_"):
            continue
        rename = profile.nccl_env.get(name)
        if rename is None:
            unknown.append(name)
        elif rename.target not in os.environ:
            changes[rename.target] = rename.convert(value)
    if not ctx.registry.enabled("environment.variables"):
        return
    for name, value in changes.items():
        os.environ[name] = value
    ctx.registry.on_revert("environment.variables", lambda: [os.environ.pop(n, None) for n in changes])
    ctx.env_changes = dict(changes)
    if unknown and os.environ.get("RANK", "0") == "0":
        ctx.warn_once("NCCL_*", f"{', '.join(unknown)} {'has' if len(unknown) == 1 else 'have'} no "
                                f"equivalent for {profile.backend}; ignored")

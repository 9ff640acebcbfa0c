"""Statistics file and clean process exit for the simulated vendors."""

from __future__ import annotations

import atexit
import json
import os

_state: dict = {}


def write_stats() -> str | None:
    """Write ``$SIM_ACCEL_STATS_DIR/<vendor>-<pid>.json``; return its path."""
    directory = os.environ.get("SIM_ACCEL_STATS_DIR")
    if not directory or "spec" not in _state:
        return None
    from . import _distributed

    spec, C = _state["spec"], _state["C"]
    payload = {
        "vendor": spec.name,
        "backend": spec.backend,
        "collectives": dict(sorted(_distributed.COUNTS.items())),
        "device_indices": sorted(C.used_devices()),
    }
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{spec.name}-{os.getpid()}.json")
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f)
    os.replace(tmp, path)
    return path


def _at_exit() -> None:
    write_stats()


def install(spec, C) -> None:
    _state["spec"] = spec
    _state["C"] = C
    atexit.register(_at_exit)

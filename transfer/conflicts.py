"""Other patchers of torch in the same process: a second copy of transfer, a vendor's own CUDA migration module.

Two patchers that translate CUDA calls cannot share a process: the second
wraps the first's replacements, neither can then be undone cleanly (each
restores what it found: the other's objects), and what a call does depends on
import order. transfer refuses, whichever comes first, with `ConflictError`
(an ImportError) naming both and saying which line to remove. Standing aside
was considered and rejected: the other patcher translates differently
(transfer_to_npu rewrites by substring, moves everything to npu whatever
TRANSFER_DEVICE says, and cannot be undone), so quietly running under it
would not be what the user asked for; an error costs one line to fix.

* **A second copy of transfer**: another import path (a vendored copy, or a
  checkout on sys.path beside the installed one) installing while this one is
  active, or the reverse. Each active copy marks torch with
  ``torch._transfer_active`` (its package, path, version and target), set
  with its patches and removed at uninstall; a copy that finds another copy's
  mark refuses. Two installs of the distribution under the same import name
  (an editable install and a wheel) load one module ``transfer`` and are one
  copy: install is idempotent there.
* **A vendor's own CUDA migration module** (each profile's `migration_shims`:
  torch_npu's ``transfer_to_npu``, torch_mlu's ``gpu_migration``, Moore Threads'
  ``torchada``, torch_supa's ``transfer_to_supa``): each patches torch while it
  is imported, with no undo. Imported before transfer installs: `install()`
  raises. Imported while transfer is active: the import itself raises, before
  a line of it runs, so torch is never patched twice; a script that guards
  that import with ``except ImportError`` runs under transfer alone, which is
  what it asked for. After `transfer.uninstall()` it imports normally. The
  error names the profile's way to turn the module off.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, Optional

from .errors import ConflictError

MARK = "_transfer_active"
_PACKAGE = __name__.rsplit(".", 1)[0]
_PATH = os.path.dirname(os.path.abspath(__file__))


def _shims() -> Dict[str, Any]:
    """Every vendor's CUDA migration module -> (its profile, how to turn it off)."""
    from .profiles import PROFILES

    return {module: (p, fix) for p in PROFILES.values() for module, fix in p.migration_shims.items()}


def _use_one(module: str) -> str:
    profile, fix = _shims()[module]
    return (f"To fix: {fix[0].upper() + fix[1:]} (transfer covers it: TRANSFER_DEVICE={profile.name}, or `from transfer "
            f"import auto`), or run without transfer (TRANSFER_DEVICE=off, and no `from transfer import auto` / "
            f"transfer.install() in the script).")


def claim(registry, device: str, version: str) -> None:
    """Refuse if another patcher is active; else mark torch as ours (`version`: this copy's) and guard the
    imports of the vendors' migration modules, both undone by `registry.revert_all`."""
    import torch

    other: Optional[Dict[str, Any]] = getattr(torch, MARK, None)
    if isinstance(other, dict) and (other.get("package"), other.get("path")) != (_PACKAGE, _PATH):
        # Another module object: another install, or these very files imported under a second name.
        raise ConflictError(
            f"another copy of transfer is active in this process: '{other.get('package')}' "
            f"{other.get('version')} at {other.get('path')} (target {other.get('device')}); this copy, "
            f"'{_PACKAGE}' at {_PATH}, would patch torch a second time. Keep one: remove the other copy "
            f"(pip uninstall it, or take its directory off sys.path / PYTHONPATH), or call its "
            f"uninstall() before installing this one."
        )
    for module, (profile, _) in _shims().items():
        if module in sys.modules:
            raise ConflictError(
                f"{profile.vendor}'s CUDA migration module {module} has already patched torch in this process; "
                f"transfer would patch it a second time (CUDA calls translated twice, neither undoable). "
                + _use_one(module)
            )
    setattr(torch, MARK, {"package": _PACKAGE, "path": _PATH, "version": version, "device": device})
    registry.on_revert("conflicts.mark", lambda: torch.__dict__.pop(MARK, None))
    guard = _RefuseMigrationModules(device, frozenset(_shims()))
    sys.meta_path.insert(0, guard)
    registry.on_revert("conflicts.guard", lambda: sys.meta_path.remove(guard) if guard in sys.meta_path else None)


class _RefuseMigrationModules:
    """A meta path finder: finding or importing a vendor's migration module raises while transfer is active.
    One set lookup per import otherwise."""

    def __init__(self, device: str, modules: frozenset):
        self.device = device
        self.modules = modules

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.modules:
            return None
        raise ConflictError(
            f"transfer is active in this process (CUDA calls run on its '{self.device}' target); importing "
            f"{fullname} would patch torch a second time (CUDA calls translated twice, neither "
            f"undoable). " + _use_one(fullname)
        )

    def invalidate_caches(self) -> None:
        pass

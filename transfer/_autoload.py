"""Activation from the environment: TRANSFER_DEVICE, with no line in the script.

Three triggers lead here, whichever fires first installs and the others find
it active (`transfer.install` is idempotent):

- ``transfer.pth`` (installed with the wheel into site-packages) calls `arm`
  at interpreter start when TRANSFER_DEVICE is set: every torch, and torch
  2.5+ with its backend autoload switched off (TORCH_DEVICE_BACKEND_AUTOLOAD=0);
- torch's ``torch.backends`` entry point (torch 2.5+) calls
  `install_when_ready` near the end of ``import torch``;
- transfer-run's bootstrap sitecustomize calls `arm`.
"""

import os
import sys
from importlib.machinery import ModuleSpec  # loaded by every interpreter already

_armed = False


def arm() -> None:
    """Install transfer right after torch is imported (at once if it already is).

    Nothing is imported until torch is: a Python process that never imports
    torch is unaffected. Called once per process; later calls do nothing.
    """
    global _armed
    if _armed:
        return
    _armed = True
    import wrapt

    def on_torch(module):
        install_when_ready()

    wrapt.register_post_import_hook(on_torch, "torch")
    # `import flash_attn` before torch: import torch (installing transfer) first (dropins/__init__.py).
    from .dropins import ImportTrigger

    sys.meta_path.insert(0, ImportTrigger())


def arm_from_pth() -> None:
    """What ``transfer.pth`` runs at interpreter start once TRANSFER_DEVICE is set.

    Never raises: a broken transfer must not break Python. It says so instead,
    since the user asked for transfer and would otherwise run without it.
    """
    try:
        if os.environ.get("TRANSFER_DEVICE", "").strip():
            arm()
    except Exception as exc:  # pragma: no cover - shown on stderr
        sys.stderr.write(f"transfer: TRANSFER_DEVICE is set, but transfer could not arm itself ({exc!r}); "
                         "the program runs without it. Reinstall transfer, or unset TRANSFER_DEVICE.\n")


def install_when_ready() -> None:
    """install_or_exit() now, or once the vendor plug-in importing torch is loaded.

    Vendor plug-ins begin with ``import torch`` (torch_npu does), so a script
    whose first line is ``import torch_npu`` reaches torch's entry points while
    the plug-in is half imported and ``torch.npu`` does not exist yet.
    Installing then would report "no npu device"; it waits for the end of the
    plug-in's import instead.
    """
    pending = _vendor_mid_import() or _patches_mid_import()
    if pending is None or not _after_import(pending, install_or_exit):
        install_or_exit()


def install_or_exit() -> None:
    """install(), turning a configuration error into a one-line exit message.

    The environment asked for transfer, so running without it would be wrong;
    a SystemExit passes torch's `except Exception` around entry points and
    prints just the message, not a traceback through torch's import.
    """
    from . import install
    from .errors import TransferError

    try:
        install()
    except TransferError as exc:
        raise SystemExit(f"transfer: {exc}") from None


def _importing(module) -> bool:
    """Whether `module` (from sys.modules, or None) is still being imported: importlib sets its spec's
    ``_initializing`` while the module's code runs."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _vendor_mid_import():
    """The name of a vendor package whose import is in progress, or None."""
    from .profiles import PROFILES

    for profile in PROFILES.values():
        if profile.package and _importing(sys.modules.get(profile.package)):
            return profile.package
    return None


#: transfer's own modules that import torch at their top and that install() needs whole (or imports itself).
_IMPORTING_TORCH = ("transfer.patches", "transfer.plan", "transfer.cpu")


def _patches_mid_import():
    """The outermost of transfer's own modules whose import, in progress, imported torch (or None): a program
    whose first import is ``transfer.plan``, ``transfer.patches.*`` or ``transfer.cpu.*`` reaches torch's entry
    points from inside it, and install() needs ``transfer.patches`` whole. sys.modules is in import order: the
    first one found is the outermost."""
    for name, module in list(sys.modules.items()):
        if name.startswith(_IMPORTING_TORCH) and _importing(module):
            return name
    return None


def _after_import(name: str, callback) -> bool:
    """Call `callback()` when the import of `name`, now in progress, completes.

    Post-import hooks (wrapt's) fire at once for a module already in
    sys.modules, half imported or not, so this hooks the end of the import
    itself: importlib clears ``spec._initializing`` in a ``finally`` once the
    module's code has run (CPython 3.4 onwards). The spec's class becomes
    `_SpecNotifyingEnd`, which notices that assignment and restores itself.
    Returns False when the module has no ordinary spec (nothing hooked).
    """
    spec = getattr(sys.modules.get(name), "__spec__", None)
    if type(spec) is ModuleSpec:
        object.__setattr__(spec, "_transfer_on_loaded", [])
        spec.__class__ = _SpecNotifyingEnd
    elif type(spec) is not _SpecNotifyingEnd:
        return False  # no spec, or some other ModuleSpec subclass: leave it alone
    spec._transfer_on_loaded.append(callback)
    return True


class _SpecNotifyingEnd(ModuleSpec):
    def __setattr__(self, attribute, value):
        object.__setattr__(self, attribute, value)
        if attribute == "_initializing" and not value:
            object.__setattr__(self, "__class__", ModuleSpec)
            callbacks = self.__dict__.pop("_transfer_on_loaded", [])
            if self.name in sys.modules:  # a failed import removed it: nothing to wait for
                for callback in callbacks:
                    callback()

"""Which target to activate: TRANSFER_DEVICE, or what `auto` finds.

`auto` order: a vendor package already imported wins; then an importable
vendor package that reports devices, or a device built into torch (xpu) that
torch reports; then real CUDA (transfer stands aside); else the `cpu` target. A vendor package that is installed but fails to import
(the everyday Ascend case: CANN's set_env.sh not sourced) stops auto with an
error naming it, its error and the fix, instead of falling back to the CPU; one
that imports without devices is skipped with a warning naming it.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import re
import sys
from typing import Callable, Optional, Tuple

from . import settings
from .errors import NoDeviceError, UnknownDeviceError, VendorPackageMissing
from .profiles import AUTO, CHOICES, OFF, PROFILES, Profile

logger = logging.getLogger("transfer")

#: What `select` returns instead of a profile when real CUDA should be used as is.
NATIVE_CUDA = "native-cuda"


def requested(device: Optional[str] = None, source: Optional[str] = None) -> str:
    """The normalised request: the argument, else TRANSFER_DEVICE, else 'auto'.

    A value that names no target raises `UnknownDeviceError` naming where it came from (`source`:
    ``--device`` for transfer-run's flag; default TRANSFER_DEVICE), the closest choice and them all.
    """
    value = device if device is not None else settings.value("TRANSFER_DEVICE")
    value = (value or AUTO).strip().lower()
    if value not in CHOICES:
        guess = settings.did_you_mean(value, CHOICES, cutoff=0.5)
        where = f"{source} {value!r}" if source and source.startswith("-") else f"{source or 'TRANSFER_DEVICE'}={value!r}"
        raise UnknownDeviceError(
            f"{where} is not a known target.{guess} Choose one of: {', '.join(CHOICES)} "
            f"(auto picks the accelerator that is present; off disables transfer)."
        )
    return value


#: Set by transfer-run in the job's environment when the target came from its --device flag: the
#: messages then name the flag the user typed (``--device cpu``), not TRANSFER_DEVICE.
FROM_FLAG_ENV = "_TRANSFER_DEVICE_FROM_FLAG"


def asking_for(name: str) -> str:
    """How the user asks for target `name`: ``--device npu`` under transfer-run's flag, else TRANSFER_DEVICE=npu."""
    return f"--device {name}" if os.environ.get(FROM_FLAG_ENV) else f"TRANSFER_DEVICE={name}"


Prepare = Callable[[Profile], Callable[[], None]]


def select(device: Optional[str] = None, prepare: Optional[Prepare] = None) -> Tuple[Optional[Profile], str]:
    """Return (profile or None, why). None means: install nothing.

    `prepare(profile)` runs just before a vendor package is imported (to set its
    environment) and returns an undo, called if that vendor is not taken.
    """
    value = requested(device)
    if value == OFF:
        return None, "TRANSFER_DEVICE=off"
    if value != AUTO:
        profile = PROFILES[value]
        if not profile.is_cpu:
            activate_vendor(profile, prepare)
        return profile, f"TRANSFER_DEVICE={value}"
    return _auto(prepare)


def vendor_profiles():
    return [p for p in PROFILES.values() if not p.is_cpu]


def activate_vendor(profile: Profile, prepare: Optional[Prepare] = None) -> None:
    """Import the vendor package (none for a device built into torch) and check it has devices, or raise a
    clear error."""
    undo = prepare(profile) if prepare is not None else (lambda: None)
    try:
        _import_vendor(profile)
    except BaseException:
        undo()
        raise


def _import_vendor(profile: Profile) -> None:
    import torch

    active = _privateuse1_name(torch)
    if profile.dispatch_key == "PrivateUse1" and active not in ("privateuseone", profile.device_type):
        raise VendorPackageMissing(
            f"{asking_for(profile.name)} selects {profile.vendor}'s '{profile.device_type}' device, but "
            f"this process already runs the '{active}' device plug-in; one process can use one. "
            f"Use {asking_for(active)} (or auto)."
        )
    try:
        if profile.package is not None:
            importlib.import_module(profile.package)
    except ImportError as exc:
        raise VendorPackageMissing(
            f"{asking_for(profile.name)} needs {profile.vendor}'s PyTorch plug-in '{profile.package}', "
            f"which cannot be imported ({exc}). To fix: {install_hint(profile)}. "
            f"To run on the CPU instead: {asking_for('cpu')}."
        ) from exc
    module = getattr(torch, profile.device_type, None)
    count = module.device_count() if module is not None and module.is_available() else 0
    if count == 0:
        visible = profile.visible_devices_env
        raise NoDeviceError(
            f"{profile.package or f'torch {torch.__version__}'} {'is installed but ' if profile.package else ''}"
            f"reports no {profile.device_type} device "
            f"(torch.{profile.device_type}.device_count() == 0). Check the driver and "
            f"{visible} ({_shown(visible)}); {asking_for('cpu')} runs on the CPU instead."
        )


def install_hint(profile: Profile, torch_version: Optional[str] = None) -> str:
    """How to get `profile`'s plug-in without replacing the installed torch.

    torch_npu is released once per torch release and requires exactly it (torch_npu 2.14.0:
    ``torch==2.14.0.*``), so an unpinned ``pip install torch_npu`` (or an extra) would swap a
    torch 2.14.1 for 2.14.0. The command names the torch_npu matching the installed torch and pins
    that torch: pip installs the match, or says there is none, and never replaces torch.
    """
    hint = profile.install_hint
    if "{torch}" not in hint and "{release}" not in hint:
        return hint
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    version = str(torch_version).split("+", 1)[0]
    release = ".".join(re.match(r"\d+(\.\d+)*", version).group(0).split(".")[:3])
    return hint.format(torch=version, release=release)


def _shown(variable: str) -> str:
    value = os.environ.get(variable)
    return "unset" if value is None else f"now {value!r}"


def _privateuse1_name(torch) -> str:
    # torch 2.0 has no _get_privateuse1_backend_name (and no vendor plug-in mechanism that renames it).
    getter = getattr(torch._C, "_get_privateuse1_backend_name", None)
    return getter() if getter is not None else "privateuseone"


def _auto(prepare: Optional[Prepare] = None) -> Tuple[Optional[Profile], str]:
    """The auto choice; see the module docstring and `_auto_refuses` for an installed vendor that fails."""
    import torch

    active = _privateuse1_name(torch)
    for profile in vendor_profiles():
        if profile.device_type == active or profile.package in sys.modules:
            activate_vendor(profile, prepare)
            return profile, f"auto: {profile.package} is imported"
    broken, empty = [], []  # (profile, error): installed but failing to import / importing without devices
    for profile in vendor_profiles():
        if profile.builtin:  # in every torch: a candidate only where torch reports its devices
            module = getattr(torch, profile.device_type, None)
            if module is None or not module.is_available():
                continue
        elif importlib.util.find_spec(profile.package) is None:
            continue
        try:
            activate_vendor(profile, prepare)
        except NoDeviceError as exc:
            empty.append((profile, exc))
            continue
        except Exception as exc:  # ImportError, OSError, RuntimeError: whatever the plug-in's import raised
            broken.append((profile, exc))
            continue
        _skipped(broken + empty, "")
        return profile, f"auto: {profile.package or f'torch.{profile.device_type}'} has devices"
    cuda = torch.cuda.is_available()
    if broken and not cuda:
        raise _auto_refuses(broken)
    _skipped(broken + empty, "; running on CUDA instead" if cuda else
             "; running on the CPU instead (TRANSFER_DEVICE=cpu asks for that and says nothing)")
    if cuda:
        return None, NATIVE_CUDA
    return PROFILES["cpu"], "auto: no accelerator found"


def _skipped(failures, then: str) -> None:
    """One warning per vendor package auto passed over (rank 0: the same on every rank)."""
    if not settings.is_rank_zero():
        return
    for profile, exc in failures:
        logger.warning("transfer: auto skips %s (%s): %s%s", profile.package, profile.vendor, _reason(exc), then)


def _reason(exc: BaseException) -> str:
    """The plug-in's own error where transfer wrapped it."""
    cause = exc.__cause__ if isinstance(exc, VendorPackageMissing) and exc.__cause__ is not None else exc
    return f"{type(cause).__name__}: {cause}"


def _auto_refuses(broken) -> VendorPackageMissing:
    """An installed vendor plug-in that fails to import stops `auto` (decided).

    Whoever installed torch_npu on a machine and wrote ``from transfer import auto`` wants the
    accelerator; the everyday failure (CANN's set_env.sh not sourced: "libascendcl.so: cannot open
    shared object file") would otherwise turn into a job that trains on the CPU, hours slower, with
    nothing but a banner to say so. The error names the package, its own error and the fix;
    TRANSFER_DEVICE=cpu is the explicit way to run on the CPU. (A plug-in that imports but reports
    no device is not refused: that is a machine without the accelerator, and auto falls back with a
    warning naming it, as CUDA builds of torch run on the CPU where there is no GPU.)
    """
    profile, exc = broken[0]
    others = "".join(f" ({p.package} fails too: {_reason(e)})" for p, e in broken[1:])
    error = VendorPackageMissing(
        f"auto found {profile.vendor}'s PyTorch plug-in '{profile.package}' installed, but it cannot be "
        f"imported: {_reason(exc)}{others}. Refusing to fall back to the CPU. To fix: {install_hint(profile)}. "
        f"To run on the CPU on purpose: TRANSFER_DEVICE=cpu (or transfer.install('cpu'))."
    )
    error.__cause__ = exc
    return error

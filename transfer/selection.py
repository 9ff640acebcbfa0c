"""Which target to activate: TRANSFER_DEVICE, or what `auto` finds.

`auto` order: a vendor package already imported wins; then an importable
vendor package that reports devices; then real CUDA (transfer stands aside);
else the `cpu` target.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from typing import Callable, Optional, Tuple

from .errors import NoDeviceError, UnknownDeviceError, VendorPackageMissing
from .profiles import AUTO, CHOICES, OFF, PROFILES, Profile

logger = logging.getLogger("transfer")

#: What `select` returns instead of a profile when real CUDA should be used as is.
NATIVE_CUDA = "native-cuda"


def requested(device: Optional[str] = None) -> str:
    """The normalised request: the argument, else TRANSFER_DEVICE, else 'auto'."""
    value = device if device is not None else os.environ.get("TRANSFER_DEVICE", "")
    value = (value or AUTO).strip().lower()
    if value not in CHOICES:
        raise UnknownDeviceError(
            f"TRANSFER_DEVICE={value!r} is not a known target. Choose one of: {', '.join(CHOICES)} "
            f"(auto picks the accelerator that is present; off disables transfer)."
        )
    return value


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
        if profile.package is not None:
            activate_vendor(profile, prepare)
        return profile, f"TRANSFER_DEVICE={value}"
    return _auto(prepare)


def vendor_profiles():
    return [p for p in PROFILES.values() if p.package is not None]


def activate_vendor(profile: Profile, prepare: Optional[Prepare] = None) -> None:
    """Import the vendor package and check it has devices, or raise a clear error."""
    undo = prepare(profile) if prepare is not None else (lambda: None)
    try:
        _import_vendor(profile)
    except BaseException:
        undo()
        raise


def _import_vendor(profile: Profile) -> None:
    import torch

    active = _privateuse1_name(torch)
    if active not in ("privateuseone", profile.device_type):
        raise VendorPackageMissing(
            f"TRANSFER_DEVICE={profile.name} selects {profile.vendor}'s '{profile.device_type}' device, but "
            f"this process already runs the '{active}' device plug-in; one process can use one. "
            f"Set TRANSFER_DEVICE={active} (or auto)."
        )
    try:
        importlib.import_module(profile.package)
    except ImportError as exc:
        raise VendorPackageMissing(
            f"TRANSFER_DEVICE={profile.name} needs {profile.vendor}'s PyTorch plug-in '{profile.package}', "
            f"which cannot be imported ({exc}). To fix: {profile.install_hint}. "
            f"To run on the CPU instead: TRANSFER_DEVICE=cpu."
        ) from exc
    module = getattr(torch, profile.device_type, None)
    count = module.device_count() if module is not None and module.is_available() else 0
    if count == 0:
        visible = profile.visible_devices_env
        raise NoDeviceError(
            f"{profile.package} is installed but reports no {profile.device_type} device "
            f"(torch.{profile.device_type}.device_count() == 0). Check the driver and "
            f"{visible} ({_shown(visible)}); TRANSFER_DEVICE=cpu runs on the CPU instead."
        )


def _shown(variable: str) -> str:
    value = os.environ.get(variable)
    return "unset" if value is None else f"now {value!r}"


def _privateuse1_name(torch) -> str:
    # torch 2.0 has no _get_privateuse1_backend_name (and no vendor plug-in mechanism that renames it).
    getter = getattr(torch._C, "_get_privateuse1_backend_name", None)
    return getter() if getter is not None else "privateuseone"


def _auto(prepare: Optional[Prepare] = None) -> Tuple[Optional[Profile], str]:
    import torch

    active = _privateuse1_name(torch)
    for profile in vendor_profiles():
        if profile.device_type == active or profile.package in sys.modules:
            activate_vendor(profile, prepare)
            return profile, f"auto: {profile.package} is imported"
    for profile in vendor_profiles():
        if importlib.util.find_spec(profile.package) is None:
            continue
        try:
            activate_vendor(profile, prepare)
        except Exception as exc:  # an unusable vendor install must not stop the others
            logger.debug("transfer: auto skips %s: %s", profile.name, exc)
            continue
        return profile, f"auto: {profile.package} has devices"
    if torch.cuda.is_available():
        return None, NATIVE_CUDA
    return PROFILES["cpu"], "auto: no accelerator found"

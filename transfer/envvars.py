"""CUDA and NCCL environment variables: what each one means on every target (one table).

Every ``NCCL_*``, ``TORCH_NCCL_*`` and ``CUDA_*`` variable in a process's
environment is in exactly one class (`classify`):

* **informational**: metadata that container images and installers set and that
  nothing reads at run time (``NCCL_VERSION``, ``CUDA_VERSION``, ``CUDA_HOME``;
  every NVIDIA image sets them). Never a warning, never an error, whatever
  TRANSFER_STRICT says.
* **not needed**: configures a part of CUDA the target does not have (CUDA's JIT
  cache, lazy module loading, hardware queues); nothing to translate, nothing lost.
* **translated**: the target's own variable, with a value conversion where the
  unit or syntax differs (`transfer.profiles.Profile.env`), or **built in** where
  the target behaves so without any variable (gloo raises on a timed-out
  collective by itself).
* **unsupported**: it changes what CUDA or NCCL does, and the target has no known
  counterpart. One warning names them all (an error under TRANSFER_STRICT).

And when each takes effect (`moment`): the visible-devices family is read by a
runtime when it starts, and transfer imports the vendor plug-in at install, so it
is translated before that import (DEVICES); collective variables are read when a
process group is created, and are translated at install and again just before
every process-group creation (COLLECTIVES). A variable set or changed after its
moment has passed gets a warning saying it came too late
(`transfer.patches.environment`).

The offline tools use the same table (``transfer port``'s launch script), and
``docs/support-matrix.md`` renders it. Importing this module imports neither torch
nor any other part of transfer.
"""

from __future__ import annotations

import os
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

#: The prefixes this table covers.
PREFIXES = ("NCCL_", "TORCH_NCCL_", "CUDA_")

INFORMATIONAL, NOT_NEEDED, TRANSLATED, BUILT_IN, UNSUPPORTED = (
    "informational", "not needed", "translated", "built in", "unsupported")
DEVICES, COLLECTIVES = "devices", "collectives"

#: Read by nothing at run time; set by NVIDIA's container images and by installers.
_INFORMATIONAL = {
    "NCCL_VERSION": "the NCCL release an NVIDIA container image ships; NCCL does not read it",
    "CUDA_VERSION": "the CUDA release of an NVIDIA container image",
    "CUDA_HOME": "where the CUDA toolkit is installed; read by build tools (torch.utils.cpp_extension), "
                 "not at run time",
    "CUDA_PATH": "as CUDA_HOME",
    "CUDA_ROOT": "as CUDA_HOME",
}
#: The CUDA runtime's own variables (CUDA C++ Programming Guide, "CUDA Environment Variables") that
#: configure something the target does not have: nothing is lost without them.
_NOT_NEEDED = {
    "CUDA_DEVICE_ORDER": "vendor runtimes number devices in their driver's order, the physical ids their "
                         "visible-devices variable takes",
    "CUDA_DEVICE_MAX_CONNECTIONS": "the number of CUDA hardware work queues; vendor runtimes schedule their "
                                   "streams themselves",
    "CUDA_DEVICE_MAX_COPY_CONNECTIONS": "as CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_MODULE_LOADING": "when CUDA loads kernels (torch sets LAZY itself); the target runs no CUDA code",
    "CUDA_MODULE_DATA_LOADING": "as CUDA_MODULE_LOADING",
    "CUDA_CACHE_DISABLE": "CUDA's JIT cache; the target runs no CUDA code",
    "CUDA_CACHE_MAXSIZE": "CUDA's JIT cache; the target runs no CUDA code",
    "CUDA_CACHE_PATH": "CUDA's JIT cache; the target runs no CUDA code",
    "CUDA_FORCE_PTX_JIT": "CUDA's JIT; the target runs no CUDA code",
    "CUDA_DISABLE_PTX_JIT": "CUDA's JIT; the target runs no CUDA code",
    "CUDA_FORCE_JIT": "CUDA's JIT; the target runs no CUDA code",
    "CUDA_DISABLE_JIT": "CUDA's JIT; the target runs no CUDA code",
}
#: The CUDA runtime's variables that change behaviour. CUDA_* names outside these three tables are
#: not read by the CUDA runtime (metadata such as CUDA_PKG_VERSION): informational.
_CUDA_RUNTIME = ("CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "CUDA_MPS_", "CUDA_AUTO_BOOST",
                 "CUDA_SCALE_LAUNCH_QUEUES", "CUDA_GRAPHS_USE_NODE_PRIORITY", "CUDA_DEVICE_WAITS_ON_EXCEPTION",
                 "CUDA_ENABLE_COREDUMP_ON_EXCEPTION", "CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION",
                 "CUDA_ENABLE_LIGHTWEIGHT_COREDUMP", "CUDA_ENABLE_USER_TRIGGERED_COREDUMP", "CUDA_COREDUMP_",
                 "CUDA_MANAGED_FORCE_DEVICE_ALLOC", "CUDA_LOG_FILE", "CUDA_DISABLE_PERF_BOOST")
#: Read when the device runtime starts: the vendor plug-in is imported at install, after them.
_DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING")
#: Values launchers set in every worker when the user did not (torch.distributed.run's elastic agent:
#: TORCH_NCCL_ASYNC_ERROR_HANDLING=1). Not the user's setting: warned about, never an error.
LAUNCHER_DEFAULTS = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


class Verdict(NamedTuple):
    cls: str  # one of the classes above
    moment: str  # DEVICES or COLLECTIVES
    target: Optional[str] = None  # the target's variable (translated)
    reason: str = ""


def covered(name: str) -> bool:
    return name.startswith(PREFIXES)


def moment(name: str) -> str:
    return DEVICES if name in _DEVICE_VARIABLES else COLLECTIVES


def classify(profile, name: str) -> Verdict:
    """What `name` means on `profile` (a `transfer.profiles.Profile`)."""
    when = moment(name)
    if name in _INFORMATIONAL:
        return Verdict(INFORMATIONAL, when, reason=_INFORMATIONAL[name])
    if name in _NOT_NEEDED:
        return Verdict(NOT_NEEDED, when, reason=_NOT_NEEDED[name])
    if name == "CUDA_VISIBLE_DEVICES":
        if profile.visible_devices_env:
            return Verdict(TRANSLATED, when, profile.visible_devices_env)
        return Verdict(BUILT_IN, when, reason="the cpu target reports as many virtual devices as it lists "
                                               "(TRANSFER_CPU_DEVICES, when set, wins; an empty list, which hides "
                                               "GPUs, leaves LOCAL_WORLD_SIZE, else 2)")
    rename = profile.env.get(name)
    if rename is not None:
        if rename.target is None:
            return Verdict(BUILT_IN, when, reason=rename.note)
        return Verdict(TRANSLATED, when, rename.target, rename.note)
    if name.startswith("CUDA_") and not name.startswith(_CUDA_RUNTIME):
        return Verdict(INFORMATIONAL, when, reason="not a variable the CUDA runtime reads (image or installer "
                                                   "metadata)")
    return Verdict(UNSUPPORTED, when, reason=f"no known equivalent for {profile.backend}")


def plain_interface(value: str, available: Optional[List[str]] = None) -> str:
    """NCCL_SOCKET_IFNAME's selection as the one interface name gloo takes.

    NCCL's syntax: comma-separated prefixes (``eth`` selects eth0, eth1, ...), ``=`` in front for
    exact names, ``^`` in front to exclude (``^docker,lo``, ``^=docker0``). gloo's
    GLOO_SOCKET_IFNAME is a list of exact names, each of which must exist. The result is the first
    interface of this host (with an address, in the kernel's order) that NCCL would select; a
    selection of names none of which exists here is passed on as those names, so that gloo's own
    error names them. Raises ValueError when an exclusion leaves no interface.
    """
    text = value.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    names = [n.strip() for n in text.split(",") if n.strip()]
    if available is None:
        available = host_interfaces()

    def selected(interface: str) -> bool:
        hit = any(interface == n if exact else interface.startswith(n) for n in names)
        return hit != exclude

    chosen = [i for i in available if selected(i)]
    if chosen:
        return chosen[0]
    if not exclude and names:
        return names[0]  # gloo says which interface it cannot find
    raise ValueError(f"NCCL_SOCKET_IFNAME={value!r} selects none of this host's interfaces "
                     f"({', '.join(available) or 'none found'}): NCCL would find no socket interface either")


def host_interfaces() -> List[str]:
    """This host's network interfaces that have an address (IPv4 or IPv6), in the kernel's order."""
    import socket

    try:
        indexed = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return []
    with_address = _with_address()
    return [n for n in indexed if with_address is None or n in with_address]


def _with_address() -> Optional[set]:
    """Names of interfaces with an IPv4 or IPv6 address (Linux /proc and ioctl); None where unknown."""
    import fcntl
    import socket
    import struct

    names = set()
    try:
        with open("/proc/net/if_inet6") as fh:
            names.update(line.split()[-1] for line in fh if line.strip())
    except OSError:
        pass
    try:
        indexed = [name for _, name in socket.if_nameindex()]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            for name in indexed:
                try:
                    fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
                    names.add(name)
                except OSError:
                    continue
    except OSError:
        return None
    return names


def rows(profiles) -> Iterator[Tuple[str, Dict[str, Verdict]]]:
    """(variable, {profile name: verdict}) for every variable the table names, for the docs."""
    named = set(_INFORMATIONAL) | set(_NOT_NEEDED) | {"CUDA_VISIBLE_DEVICES"}
    for profile in profiles.values():
        named |= set(profile.env)
    for name in sorted(named):
        yield name, {p: classify(profile, name) for p, profile in profiles.items()}


def warning_for_unsupported(names: List[str], where: str) -> str:
    """The warning naming unsupported variables: ``NCCL_IB_DISABLE has no equivalent for eccl; ignored``."""
    verb = "has" if len(names) == 1 else "have"
    return f"{', '.join(names)} {verb} no equivalent {where}; ignored"


def environ_items() -> List[Tuple[str, str]]:
    return sorted((k, v) for k, v in os.environ.items() if covered(k))

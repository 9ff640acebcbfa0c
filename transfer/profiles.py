"""The table of targets: one frozen `Profile` per accelerator family.

Adding a vendor that plugs into PyTorch the usual way (PrivateUse1 device, a
`torch.<name>` module, a registered collective backend) is one entry here plus
its tests; no other module names a vendor.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, NamedTuple, Optional

# NamedTuples, not frozen dataclasses: as immutable, and ~2 ms cheaper to
# import (dataclasses generate their methods with exec), which counts toward
# `import transfer.auto`.


class EnvRename(NamedTuple):
    """An NCCL_* variable and the name (and unit conversion) it has on a target."""

    target: str
    scale: float = 1.0  # value * scale, for numeric variables whose unit differs

    def convert(self, value: str) -> str:
        if self.scale == 1.0:
            return value
        return str(max(1, int(float(value) * self.scale)))


class Profile(NamedTuple):
    """Everything `transfer` needs to know about one target."""

    name: str  # what TRANSFER_DEVICE says
    vendor: str  # who makes it, for messages
    package: Optional[str]  # the Python package that plugs the device into torch
    install_hint: str  # how a user gets that package
    device_type: str  # torch.device(<device_type>, N)
    backend: str  # torch.distributed backend replacing nccl
    visible_devices_env: Optional[str]  # CUDA_VISIBLE_DEVICES equivalent
    nccl_env: Mapping[str, EnvRename] = MappingProxyType({})
    # tccl: the device must be set before init_process_group (seed 000).
    set_device_before_init: bool = False
    # tccl: one process per device; several ranks may not share a card.
    one_process_per_device: bool = False
    notes: str = ""
    # What the target offers instead of a CUDA C++ extension (.cu sources), for the
    # error a CUDAExtension / cpp_extension.load of CUDA sources raises.
    custom_kernels: str = ""

    @property
    def is_cpu(self) -> bool:
        return self.device_type == "cpu"


def _env(**renames: EnvRename) -> Mapping[str, EnvRename]:
    return MappingProxyType(dict(renames))


PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        p.name: p
        for p in (
            Profile(
                name="npu",
                vendor="Huawei Ascend",
                package="torch_npu",
                install_hint="pip install 'transfer[npu]' (torch_npu also needs the CANN toolkit: "
                "source /usr/local/Ascend/ascend-toolkit/set_env.sh)",
                device_type="npu",
                backend="hccl",
                visible_devices_env="ASCEND_RT_VISIBLE_DEVICES",
                custom_kernels="Ascend C custom operators (CANN's operator development kit, msopgen), called "
                "from PyTorch through torch_npu's custom-operator adaptation (OpPlugin) or a C++ extension "
                "registering the op for PrivateUse1",
                nccl_env=_env(
                    NCCL_SOCKET_IFNAME=EnvRename("HCCL_SOCKET_IFNAME"),
                    # NCCL_BUFFSIZE is in bytes, HCCL_BUFFSIZE in MB.
                    NCCL_BUFFSIZE=EnvRename("HCCL_BUFFSIZE", scale=1 / (1024 * 1024)),
                ),
            ),
            Profile(
                name="sdaa",
                vendor="Tecorigin",
                package="torch_sdaa",
                install_hint="install torch_sdaa from Tecorigin's TecoPyTorch release "
                "(it is not on PyPI), e.g. inside the teco training docker image",
                device_type="sdaa",
                backend="tccl",
                visible_devices_env="SDAA_VISIBLE_DEVICES",
                custom_kernels="kernels in Tecorigin's own device language from its SDK, registered for "
                "PrivateUse1 through torch_sdaa's extension mechanism",
                # tccl is NCCL-derived and keeps NCCL's variable names under its prefix.
                nccl_env=_env(NCCL_SOCKET_IFNAME=EnvRename("TCCL_SOCKET_IFNAME")),
                set_device_before_init=True,
                one_process_per_device=True,
                notes="tccl needs the device set before init_process_group; one process per card",
            ),
            Profile(
                name="gcu",
                vendor="Enflame",
                package="torch_gcu",
                install_hint="install torch_gcu from Enflame's TopsRider release (it is not on PyPI)",
                device_type="gcu",
                backend="eccl",
                visible_devices_env="TOPS_VISIBLE_DEVICES",
                custom_kernels="kernels in Enflame's own device language from its TopsRider SDK, registered "
                "for PrivateUse1 through torch_gcu's extension mechanism",
                nccl_env=_env(NCCL_SOCKET_IFNAME=EnvRename("ECCL_SOCKET_IFNAME")),
                notes="builds from 2020-21 showed devices as xla:N",
            ),
            Profile(
                name="cpu",
                vendor="any CPU",
                package=None,
                install_hint="",
                device_type="cpu",
                backend="gloo",
                visible_devices_env=None,
                custom_kernels="a C++ CPU implementation built with CppExtension / cpp_extension.load of the "
                ".cpp sources alone",
                nccl_env=_env(NCCL_SOCKET_IFNAME=EnvRename("GLOO_SOCKET_IFNAME")),
                notes="runs CUDA scripts on the CPU; collectives over gloo",
            ),
        )
    }
)

#: Values TRANSFER_DEVICE accepts besides the profile names.
AUTO, OFF = "auto", "off"
CHOICES = (AUTO, *PROFILES, OFF)

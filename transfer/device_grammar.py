"""torch's device-string grammar, without torch: the one parser of device strings.

`transfer.devices` (at run time, on a translation-cache miss) and the offline
`transfer.migrate` tools (which never import torch) both ask this module
whether a string names a device and which. It is c10/core/Device.cpp's
``Device(const std::string&)``, the parser behind ``torch.device(str)`` and
every ``device=`` string, on every torch 2.0-2.14:

* ``NAME`` or ``NAME:INDEX``; NAME is ASCII letters and ``_`` (``std::isalpha``
  in the C locale), INDEX is ``0`` or ASCII digits without a leading zero.
  Nothing else: no case folding, no whitespace, no sign, no ``'cuda:01'``, no
  non-ASCII digits (``'cuda:²'``). The structure is checked first ("Invalid
  device string"), then the index ("Could not parse device index": more than
  ``std::stoi`` holds), then the name ("Expected one of ... device type").
* The index is a ``c10::DeviceIndex``, an int8: ``std::stoi``'s value wraps
  (``'cuda:256'`` is ``cuda:0``, ``'cuda:128'`` is ``cuda:-128``) and -1 means
  no index (``'cuda:255'`` is ``cuda``). Release builds do not validate it.

`parse` returns ``(type, index)`` exactly as ``torch.device(text)`` gives
``(d.type, d.index)``, or raises `DeviceStringError` where torch raises; the
known type names are an argument because they change between torch versions
(2.0 lists ``ort``, 2.13 ``maia``) and a vendor plug-in adds its own. At run
time transfer never shows this module's messages: a string that is not a CUDA
device is handed to torch unchanged, and torch raises its own error.
``tests/test_device_grammar.py`` checks this parser against ``torch.device``
over generated strings.
"""

from __future__ import annotations

from typing import Iterable, Optional, Tuple

#: c10's device type names in the order its error message lists them (torch 2.13).
DEVICE_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia",
                "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone")

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_DIGITS = frozenset("0123456789")
_STOI_MAX = 2 ** 31 - 1  # std::stoi throws std::out_of_range past int's range


class DeviceStringError(ValueError):
    """Not a device string torch accepts; the message is torch's own wording."""


def split(text: str) -> Tuple[str, Optional[str]]:
    """``(name, index digits or None)`` of a structurally valid device string.

    Raises `DeviceStringError` ("Device string must not be empty", "Invalid
    device string: '...'") where c10's state machine does.
    """
    if not text:
        raise DeviceStringError("Device string must not be empty")
    name, colon, digits = text.partition(":")
    if (not name or not _NAME_CHARS.issuperset(name)
            or colon and (not digits or not _DIGITS.issuperset(digits) or len(digits) > 1 and digits[0] == "0")):
        raise DeviceStringError(f"Invalid device string: '{text}'")
    return name, digits if colon else None


def device_index(digits: str, text: str) -> Optional[int]:
    """The index c10 stores for `digits` (int8 wrap-around; -1 is None)."""
    if len(digits) > 10 or int(digits) > _STOI_MAX:  # (the length test first: int() of 5000 digits raises)
        raise DeviceStringError(f"Could not parse device index '{digits}' in device string '{text}'")
    index = (int(digits) + 128) % 256 - 128
    return None if index == -1 else index


def parse(text: str, types: Iterable[str] = DEVICE_TYPES) -> Tuple[str, Optional[int]]:
    """``(type, index)`` as ``torch.device(text)`` gives them; `types`: the known type names."""
    name, digits = split(text)
    index = None if digits is None else device_index(digits, text)
    if name not in types:
        raise DeviceStringError(f"Expected one of {', '.join(types)} device type at start of device string: {name}")
    return name, index


def cuda_index(text: str) -> Optional[Tuple[Optional[int]]]:
    """``(index,)`` when `text` is a CUDA device string torch accepts (index None: the current
    device), else None: malformed strings and other devices alike."""
    try:
        name, digits = split(text)
        if name != "cuda":
            return None
        return (None if digits is None else device_index(digits, text),)
    except DeviceStringError:
        return None

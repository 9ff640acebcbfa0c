"""Exact translation of CUDA device arguments to the active target.

Only real device specifications are translated: the strings torch itself
parses as a CUDA device (``"cuda"``, ``"cuda:N"``: `transfer.device_grammar`,
c10's grammar exactly), ``torch.device("cuda", N)`` and, where CUDA reads them
as ordinals, ints. Everything else comes back as the very same object: other
devices (``"cpu"``, ``"npu:1"``), strings that are no device (a file path that
happens to contain "cuda", ``"cuda:nccl"``) and strings torch rejects
(``"CUDA:0"``, ``" cuda"``, ``"cuda:01"``), so the call raises torch's own
error, as on CUDA. Never a substring rewrite.

The hot path is one type test and one dict lookup: each patched API owns a
`Translator` whose cache maps every argument it has seen to its translation.
A cache miss takes the slow path, which also records the translation, with the
caller's file and line, for `transfer.status()`; so the report costs nothing
on later calls.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Dict, List, Optional

import torch

from .device_grammar import cuda_index
from .errors import TransferError
from .frames import caller_site

#: The C base class of torch.Tensor, whose methods are torch's own whatever is patched on Tensor
#: (torch < 2.3 names it `_TensorBase`).
TensorBase = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase

#: Argument types that can name a device; anything else is passed through.
DEVICE_SPEC_TYPES = frozenset({str, int, torch.device})
_CACHE_LIMIT = 512  # distinct arguments per API; past that, translate uncached
_MISS = object()


class InvalidDeviceError(TransferError, AssertionError):
    """A device ordinal the target does not have (negative, or past its count).

    A RuntimeError like CUDA's "invalid device ordinal" (``x.cuda(3)``,
    factories, ``set_device``) and an AssertionError like CUDA's "Invalid device
    id" (``get_device_name(3)``, ``get_device_properties(3)``), so whichever
    CUDA's entry point raises, the same ``except`` catches it on every target.
    """


def invalid_ordinal(index: Any, device_type: str, count: int) -> InvalidDeviceError:
    """The error for ordinal `index`: names the device count and how to change it."""
    if device_type == "cpu":
        fix = "set TRANSFER_CPU_DEVICES=N for N virtual devices"
    else:
        from .profiles import PROFILES

        env = next((p.visible_devices_env for p in PROFILES.values() if p.device_type == device_type), None)
        fix = f"{env} (or CUDA_VISIBLE_DEVICES) selects which are visible" if env else "check the visible devices"
    return InvalidDeviceError(
        f"invalid device ordinal cuda:{index}: the {device_type} target has {count} device(s), "
        f"valid ordinals are 0..{count - 1}; {fix}"
    )


def parse_cuda(spec: Any) -> Optional[tuple]:
    """Return ``(index_or_None,)`` if `spec` names a CUDA device, else None.

    Strings follow torch's grammar exactly (`device_grammar.cuda_index`), so
    ``'CUDA:0'`` or ``'cuda:01'`` name no device here, as for torch. A negative
    int is an ordinal too (CUDA rejects it; `Target.device` does)."""
    kind = type(spec)
    if kind is torch.device:
        return (spec.index,) if spec.type == "cuda" else None
    if kind is int:
        return (spec,)
    if kind is str:
        return cuda_index(spec)
    return None


def raise_as_torch(spec: Any) -> None:
    """Raise torch's own error for a device string torch rejects (``torch.device(spec)`` raises it).

    For the places where transfer answers a CUDA call itself (the cpu target's
    torch.cuda functions, ``Tensor.cuda`` there), so a malformed string fails
    with the very exception and message CUDA gives. Anything else returns."""
    if type(spec) is str and cuda_index(spec) is None:
        torch.device(spec)


class Target:
    """The device CUDA arguments turn into, and the report of what was turned."""

    def __init__(self, device_type: str, device_count: Callable[[], int]):
        self.device_type = device_type
        self._device_count = device_count
        self._lock = threading.Lock()
        self.translations: Dict[str, Dict[str, dict]] = {}

    def device(self, index: Optional[int], check: bool = True) -> torch.device:
        """The target device for CUDA ordinal `index` (None: the current device).

        With `check` (outside traced code), a negative ordinal or one past the
        device count raises `InvalidDeviceError`, on every target alike.
        """
        if check and index is not None:
            count = self._device_count()
            if not 0 <= index < count:
                raise invalid_ordinal(index, self.device_type, count)
        if self.device_type == "cpu":
            return torch.device("cpu")
        return torch.device(self.device_type) if index is None else torch.device(self.device_type, index)

    def translate(self, spec: Any, check: bool = True) -> Any:
        """Translate one device argument without caching or recording."""
        parsed = parse_cuda(spec)
        if parsed is None:
            return spec
        return self.device(parsed[0], check)

    def record(self, api: str, spec: Any, result: Any) -> None:
        site = caller_site()
        with self._lock:
            per_api = self.translations.setdefault(api, {})
            entry = per_api.get(repr(spec))
            if entry is None:
                per_api[repr(spec)] = {"to": str(result), "first_site": site, "sites": 1}

    def translator(self, api: str) -> "Translator":
        return Translator(self, api)


def _dynamo_is_compiling() -> bool:
    dynamo = sys.modules.get("torch._dynamo")  # nothing is traced before dynamo is imported
    return dynamo is not None and dynamo.is_compiling()


# torch < 2.3 has no torch.compiler.is_compiling (torch 2.0 has no torch.compiler).
is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or _dynamo_is_compiling


class Translator:
    """A per-API cache in front of `Target.translate`; calling it translates."""

    __slots__ = ("target", "api", "cache")

    def __init__(self, target: Target, api: str):
        self.target = target
        self.api = api
        self.cache: Dict[Any, Any] = {}

    def __call__(self, spec: Any) -> Any:
        if type(spec) not in DEVICE_SPEC_TYPES:
            return spec
        result = self.cache.get(spec, _MISS)
        if result is _MISS:
            result = self.miss(spec)
        return result

    def miss(self, spec: Any) -> Any:
        if is_compiling():
            # Inside a traced graph: pure computation only (no env reads, frame
            # walking or cache growth), so torch.compile sees no graph break.
            return self.target.translate(spec, check=False)
        result = self.target.translate(spec)
        if result is not spec:
            self.target.record(self.api, spec, result)
        if len(self.cache) < _CACHE_LIMIT:
            self.cache[spec] = result
        return result


def translations_table(target: Target) -> List[dict]:
    """The report as rows: api, argument, result, first call site."""
    rows = []
    for api, entries in sorted(target.translations.items()):
        for spec, entry in sorted(entries.items()):
            rows.append({"api": api, "argument": spec, "to": entry["to"], "first_site": entry["first_site"]})
    return rows

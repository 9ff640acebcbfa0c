"""The per-call-site runtime log: ``TRANSFER_LOG=<dir>`` (``transfer-run --log DIR``).

Every CUDA-facing call the shim intercepted, once per call site (the user's
frame: the first outside torch and transfer): time, file:line, the source
line, the class from the support table, the original call and what it became.
JSON lines in ``<dir>/transfer-log-rank<R>.jsonl``; rank 0 prints a short
summary at exit. The same records feed `transfer.status()['call_sites']`.

Free when off: `attach` runs only when TRANSFER_LOG is set, and it wraps the
already installed replacements; with it unset nothing is wrapped.
"""

from __future__ import annotations

import atexit
import inspect
import json
import linecache
import os
import sys
import threading
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional

import torch

from . import support
from .devices import _PACKAGE_DIR, _TORCH_DIR, parse_cuda

_AREAS = ("cuda_namespace", "tensor", "module", "factories", "distributed", "amp", "serialization")
_DEVICE_KEYS = ("device", "map_location", "device_type", "device_id")


class CallLog:
    def __init__(self, directory: str, ctx):
        self.ctx = ctx
        self.rank = os.environ.get("RANK", "0")
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, f"transfer-log-rank{self.rank}.jsonl")
        self.records: List[Dict[str, Any]] = []
        self._seen: set = set()
        self._lock = threading.Lock()
        self._file = None  # opened on the first record, so a process logging nothing writes nothing

    def add(self, api: str, frame, args: tuple, kwargs: dict, cls: str, became: str) -> None:
        filename, line = frame.f_code.co_filename, frame.f_lineno
        record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "rank": int(self.rank) if self.rank.isdigit() else self.rank,
                  "site": f"{filename}:{line}", "source": linecache.getline(filename, line).strip(),
                  "class": cls, "call": f"{api}({_args(args, kwargs)})", "became": became}
        with self._lock:
            if self._file is None:
                if _is_launcher():  # checked late: `python -m` names __main__ after torch's import
                    return
                self._file = open(self.path, "a", encoding="utf-8")
            self.records.append(record)
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def summary(self) -> str:
        counts = Counter(r["class"] for r in self.records)
        return (f"transfer: {len(self.records)} CUDA-facing call site(s) logged in {self.path} ("
                + ", ".join(f"{n} {c}" for c, n in sorted(counts.items())) + ")")


def _args(args: tuple, kwargs: dict) -> str:
    shown = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return ", ".join(shown)


def _short(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"<tensor on {value.device}>"
    if isinstance(value, torch.nn.Module):
        return f"<{type(value).__name__}>"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _user_frame(frame):
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(_PACKAGE_DIR) or name.startswith(_TORCH_DIR) or name.startswith("<frozen")
                or name.endswith("typing_extensions.py")):  # deprecated torch.cuda.amp APIs pass through it
            return frame
        frame = frame.f_back
    return None


def _is_launcher() -> bool:
    """torchrun's own process: it runs no user code, and has no rank of its own."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", "") == "torch.distributed.run" or os.path.basename(sys.argv[0] or "") == "torchrun"


def attach(ctx, directory: str) -> CallLog:
    """Wrap the installed replacements of the CUDA-facing areas so each call site is logged once."""
    log = CallLog(directory, ctx)
    for record in ctx.registry.records():
        area = record.name.split(".", 1)[0]
        if area not in _AREAS or record.attribute == "nvtx":
            continue
        replacement = record.replacement
        if inspect.isclass(replacement) or not callable(replacement) or isinstance(replacement, property):
            continue
        wrapped = _logging(log, record.name, _api(record), replacement)
        setattr(record.owner, record.attribute, wrapped)
        record.replacement = wrapped
    if log.rank == "0":
        atexit.register(lambda: log.records and sys.stderr.write(log.summary() + "\n"))
    return log


def _api(record) -> str:
    owner = record.owner
    if owner is torch.cuda:
        return f"torch.cuda.{record.attribute}"
    if owner is torch.Tensor:
        return f"Tensor.{record.attribute}"
    if owner is torch.nn.Module:
        return f"Module.{record.attribute}"
    if record.attribute == "__init__":
        return f"{owner.__name__}"
    return f"{getattr(owner, '__name__', owner)}.{record.attribute}"


def _logging(log: CallLog, name: str, api: str, fn: Callable) -> Callable:
    profile = log.ctx.profile
    target = log.ctx.target
    always = api.startswith("torch.cuda.") or api == "Tensor.cuda"
    table_api = api if api.startswith("torch.cuda.") else None

    def classify(args, kwargs):
        """(class, became) if the call is CUDA-facing, else None."""
        if table_api is not None:
            entry = support.lookup(profile.name, table_api)
            return entry.cls, entry.to or entry.cls
        if api == "Tensor.cuda":
            device = args[1] if len(args) > 1 else kwargs.get("device")
            return support.TRANSLATED, f"Tensor.to({target.translate('cuda' if device is None else device, False)})"
        if name.startswith("distributed."):
            from .patches.distributed import translate_backend

            backend = args[0] if args else kwargs.get("backend")
            if backend is None or str(backend).lower() in ("nccl",) or "cuda" in str(backend):
                return support.TRANSLATED, f"backend {translate_backend(log.ctx, backend)!r}"
            return None
        if name == "amp.GradScaler" and len(args) < 2 and "device" not in kwargs:
            return support.TRANSLATED, f"GradScaler({profile.device_type!r})"  # its default device is 'cuda'
        candidates = list(args[1:2] if api.startswith(("Tensor.", "Module.")) or name.startswith("amp.") else ())
        candidates += [kwargs[k] for k in _DEVICE_KEYS if k in kwargs]
        for value in candidates:
            if isinstance(value, (str, torch.device)) and parse_cuda(value) is not None:
                return support.TRANSLATED, f"{value!r} -> {target.translate(value, False)}"
            if isinstance(value, dict) and any(isinstance(v, str) and parse_cuda(v) is not None
                                               for v in (*value, *value.values())):
                return support.TRANSLATED, "map_location " + repr({k: str(target.translate(v, False))
                                                                  for k, v in value.items()})
        return None

    seen = log._seen

    def logged(*args, **kwargs):
        frame = _user_frame(sys._getframe(1))
        if frame is not None:
            key = (api, frame.f_code.co_filename, frame.f_lineno)
            if key not in seen:
                verdict = classify(args, kwargs)
                if verdict is not None:
                    seen.add(key)
                    log.add(api, frame, args[1:] if api.startswith(("Tensor.", "Module.")) or name.startswith("amp.") else args,
                                kwargs,
                            *verdict)
        return fn(*args, **kwargs)

    logged.__name__ = getattr(fn, "__name__", api.rsplit(".", 1)[-1])
    logged.__qualname__ = getattr(fn, "__qualname__", logged.__name__)
    logged.__doc__ = getattr(fn, "__doc__", None)
    logged.__wrapped__ = fn
    return logged

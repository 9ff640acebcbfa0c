"""Whose code is a frame: torch's own, transfer's plumbing, or the user's.

The one place that decides it, for the report's first call site
(`transfer.devices`), the per-call-site log (`transfer.calllog`) and the
warnings that torch's own calls must not trigger (`patches.cuda_namespace`),
and which callers of ``torch.accelerator`` are the user's script
(`patches.accelerator`).

A file is torch's when it lies inside torch's package directory, tested with
the trailing separator: ``site-packages/torchvision/`` and
``site-packages/torch_npu/`` are siblings of ``site-packages/torch/``, not
part of it. Transfer's own files, the import machinery (``<frozen ...>``) and
``typing_extensions`` (whose ``@deprecated`` wraps torch.cuda.amp's old APIs)
are plumbing: skipped when looking for who called. The verdict is cached per
file name.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, Optional

import torch


def package_dir(init_file: str) -> str:
    """The directory of a package's ``__init__.py``, with a trailing separator."""
    return os.path.join(os.path.dirname(os.path.abspath(init_file)), "")


TORCH_DIR = package_dir(torch.__file__)
PACKAGE_DIR = package_dir(__file__)  # transfer's

TORCH, PLUMBING, USER = "torch", "plumbing", "user"
# file name -> kind. Keyed by the name, not the code object: code objects compare equal across
# files (co_filename is not part of their equality), so one file's verdict would answer for another's.
_KINDS: Dict[str, str] = {}


def file_kind(filename: str) -> str:
    """`TORCH`, `PLUMBING` (transfer, import machinery, typing_extensions) or `USER`."""
    if filename.startswith(TORCH_DIR):
        return TORCH
    if filename.startswith((PACKAGE_DIR, "<frozen")) or os.path.basename(filename) == "typing_extensions.py":
        return PLUMBING
    return USER


def kind(code) -> str:
    """`file_kind` of a code object's file, cached."""
    filename = code.co_filename
    known = _KINDS.get(filename)
    if known is None:
        known = _KINDS[filename] = file_kind(filename)
    return known


#: A file in an installed distribution: accelerate, transformers, Lightning, the vendor's plug-in.
_INSTALLED_PARTS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")
ASK_CALLER = 2  # source compiled from a string (eval, exec, python -c): whoever ran it decides
SCRIPT_VERDICTS: Dict[str, int] = {}  # file name -> 1 the user's script, 0 not, _ASK_CALLER


def script_verdict(code) -> int:
    """1 the user's own code, 0 not, `ASK_CALLER` code compiled from a string (see `is_script`); cached."""
    filename = code.co_filename
    known = SCRIPT_VERDICTS.get(filename)
    if known is None:
        if kind(code) != USER:
            known = 0
        elif filename.startswith("<"):
            known = ASK_CALLER
        else:
            known = int(not any(part in filename for part in _INSTALLED_PARTS))
        SCRIPT_VERDICTS[filename] = known
    return known


def is_script(frame) -> bool:
    """True when `frame` runs the user's own code: `USER`, and not a library installed under site-packages
    (dist-packages on Debian; an editable install counts as the user's code). Cached per file name.

    Code compiled from a string (``<string>``) is its runner's: an ``exec`` in the user's script is the
    script, ``python -c`` (nothing ran it) too, and torch.compile's guards, evaluated by dynamo, are torch's.
    """
    while True:
        known = SCRIPT_VERDICTS.get(frame.f_code.co_filename)
        if known is None:
            known = script_verdict(frame.f_code)
        if known != ASK_CALLER or frame.f_back is None:
            return known != 0
        frame = frame.f_back


def is_internal(code) -> bool:
    """torch's or transfer's (or plumbing): not the user's code."""
    return kind(code) != USER


def user_frame(frame, wrapping: Any = None) -> Optional[Any]:
    """The nearest frame, from `frame` outwards, that is the user's code (None: there is none).

    `wrapping`, a function: the frames of the wrappers in its ``__wrapped__`` chain are not the user's
    either. Libraries re-bind public torch functions to pass-through wrappers (Lightning's
    ``torch.compile = _capture_compile_kwargs(torch.compile)`` at import): the line to name is the one that
    called torch.compile, not the wrapper's body.
    """
    skip = set()
    while wrapping is not None and len(skip) < 32:
        code = getattr(wrapping, "__code__", None)
        if code is not None:
            skip.add(id(code))  # by identity: code objects compare equal across files
        wrapping = getattr(wrapping, "__wrapped__", None)
    while frame is not None and (kind(frame.f_code) != USER or id(frame.f_code) in skip):
        frame = frame.f_back
    return frame


def called_by_torch(frame) -> bool:
    """True when the nearest caller outside transfer's plumbing, from `frame` outwards, is torch's own code
    (SyncBatchNorm's forward asking ``torch.cuda.is_available()``, ``torch.manual_seed`` seeding CUDA)."""
    while frame is not None:
        found = kind(frame.f_code)
        if found != PLUMBING:
            return found == TORCH
        frame = frame.f_back
    return False


def caller_site(depth: int = 1) -> str:
    """``file:line`` of the user's frame nearest to the caller's caller (`depth` frames up from the caller)."""
    frame = user_frame(sys._getframe(depth + 1))
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"

"""The error for a name a provided module lacks: ``from <module> import <name>`` gets an ImportError that
says what the module provides (Python's own would be a bare "cannot import name"); ``getattr`` /
``hasattr`` get the AttributeError they expect, with the same message."""

import dis
import sys
from typing import Iterable

_IMPORT_FROM = dis.opmap.get("IMPORT_FROM")


def missing(module: str, name: str, provided: Iterable[str], package: str) -> Exception:
    """The exception a provided module's ``__getattr__`` raises for `name` (caller: that ``__getattr__``)."""
    detail = (f"transfer's {package} provides {', '.join(provided)} ({package}'s CUDA kernels cannot run on "
              "this target). See docs/thirdparty.md.")
    frame = sys._getframe(2)  # the code asking: missing() <- __getattr__ <- it
    if frame is not None and _IMPORT_FROM is not None:
        code = frame.f_code.co_code
        if 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == _IMPORT_FROM:
            return ImportError(f"cannot import name {name!r} from {module!r}: {detail}", name=module)
    return AttributeError(f"module {module!r} has no attribute {name!r}: {detail}")

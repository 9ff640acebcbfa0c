"""Finding and reading Python sources: directories walked, encodings honoured.

`read` decodes by the PEP 263 declaration (or BOM); undeclared sources that
are not UTF-8 are tried as GB18030 (a superset of GBK, common in this field).
"""

from __future__ import annotations

import io
import os
import tokenize
from typing import Iterator, List, Tuple

_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", ".tox", ".nox", "node_modules", "build", "dist"}


CUDA_SUFFIXES = (".cu", ".cuh")


def files(paths: List[str]) -> Iterator[Tuple[str, str]]:
    """(root, file) for every .py, .cu and .cuh file under `paths` (files given are taken as they are),
    in a stable order. Raises FileNotFoundError naming a path that does not exist."""
    for path in paths:
        if os.path.isfile(path):
            yield os.path.dirname(path) or ".", path
        elif os.path.isdir(path):
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
                for name in sorted(names):
                    if name.endswith((".py",) + CUDA_SUFFIXES):
                        yield path, os.path.join(folder, name)
        else:
            raise FileNotFoundError(f"{path}: no such file or directory; give Python files or directories")


def is_cuda_source(path: str) -> bool:
    return path.endswith(CUDA_SUFFIXES)


def read(path: str) -> Tuple[str, str]:
    """(text, encoding) of a source file. Raises UnicodeDecodeError/SyntaxError if undecodable."""
    with open(path, "rb") as fh:
        data = fh.read()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    try:
        return data.decode(encoding), encoding
    except UnicodeDecodeError:
        if encoding not in ("utf-8", "utf-8-sig"):
            raise
        return data.decode("gb18030"), "gb18030"  # undeclared, not UTF-8: GBK is the usual suspect

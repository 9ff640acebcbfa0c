"""Build (once) and load the C++ half of the simulated accelerator.

The extension is compiled with ``torch.utils.cpp_extension.load`` into
``$SIM_ACCEL_BUILD_DIR`` (default ``~/.cache/sim_accel``) under a folder named
by a hash of the sources, the compiler flags, the Python ABI and the torch
version, so a change of any of them rebuilds and an unchanged tree never
does. Concurrent importers (torchrun ranks, pytest-xdist workers) serialise
on an ``flock`` held on a lock file: the first one builds, the others wait
and then load the finished module. A failed build raises ``ImportError``
with the compiler output, so tests that need the stand-ins fail loudly.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import time
from pathlib import Path

import torch

_HERE = Path(__file__).resolve().parent
# every C++ file of csrc/ is part of the extension (sorted: the hash and the link order stay stable)
_SOURCES = sorted(p.relative_to(_HERE).as_posix() for p in (_HERE / "csrc").glob("*.cpp"))
_HEADERS = sorted(p.relative_to(_HERE).as_posix() for p in (_HERE / "csrc").glob("*.h"))
_CFLAGS = ["-O1", "-g0", "-fvisibility=hidden"]
_BUILT_MARKER = "BUILT"

_module = None


def cache_root() -> Path:
    env = os.environ.get("SIM_ACCEL_BUILD_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "sim_accel"


def source_hash() -> str:
    h = hashlib.sha256()
    for rel in _SOURCES + _HEADERS + ["_build.py"]:
        h.update(rel.encode())
        h.update((_HERE / rel).read_bytes())
    h.update(torch.__version__.encode())
    h.update(str(torch._C._GLIBCXX_USE_CXX11_ABI).encode())
    h.update(sys.version.encode())
    h.update((sysconfig.get_config_var("EXT_SUFFIX") or "").encode())
    h.update(" ".join(_CFLAGS).encode())
    return h.hexdigest()[:16]


def _module_name(digest: str) -> str:
    return f"sim_accel_C_{digest}"


def _load_built(build_dir: Path, name: str):
    candidates = sorted(build_dir.glob(f"{name}*.so"))
    if not candidates:
        raise ImportError(f"simulated accelerator: no {name}*.so in {build_dir}")
    loader = importlib.machinery.ExtensionFileLoader(name, str(candidates[0]))
    spec = importlib.util.spec_from_file_location(name, str(candidates[0]), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    sys.modules[name] = mod
    return mod


def load_extension():
    """Return the compiled extension module, building it first if needed."""
    global _module
    if _module is not None:
        return _module
    digest = source_hash()
    name = _module_name(digest)
    root = cache_root()
    build_dir = root / digest
    build_dir.mkdir(parents=True, exist_ok=True)
    lock_path = root / f"{digest}.lock"
    with open(lock_path, "a+") as lock_file:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
        try:
            if (build_dir / _BUILT_MARKER).exists():
                _module = _load_built(build_dir, name)
                return _module
            _module = _compile(build_dir, name)
            return _module
        finally:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)


def _compile(build_dir: Path, name: str):
    from torch.utils import cpp_extension

    start = time.monotonic()
    # torch's own FileBaton ("lock" in the build folder) is left behind when a
    # build is killed, and then makes every later build wait forever. We hold
    # the flock, so nobody else is building here: a leftover baton is stale.
    stale = build_dir / "lock"
    if stale.exists():
        stale.unlink()
    try:
        mod = cpp_extension.load(
            name=name,
            sources=[str(_HERE / s) for s in _SOURCES],
            extra_cflags=list(_CFLAGS),
            extra_include_paths=[str(_HERE / "csrc")],
            build_directory=str(build_dir),
            with_cuda=False,
            verbose=bool(os.environ.get("SIM_ACCEL_BUILD_VERBOSE")),
        )
    except Exception as exc:  # compiler missing, ninja missing, compile error
        raise ImportError(
            "simulated accelerator: building the C++ extension failed "
            f"(build dir {build_dir}; needs g++ and ninja, `pip install ninja`): {exc}"
        ) from exc
    (build_dir / _BUILT_MARKER).write_text(f"built in {time.monotonic() - start:.1f}s\n")
    return mod

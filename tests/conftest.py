"""Shared fixtures: an installed target per test, and subprocess runners."""

import os
import socket
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENDORS = os.path.join(ROOT, "tests", "vendors")
EXAMPLES = os.path.join(ROOT, "examples")
SCRIPTS = os.path.join(ROOT, "tests", "scripts")


@pytest.fixture
def cpu_target(monkeypatch):
    """transfer installed for the cpu target for one test, uninstalled after."""
    import transfer

    transfer.uninstall()
    for name in ("TRANSFER_DISABLE", "TRANSFER_STRICT", "TRANSFER_CPU_DEVICES", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRANSFER_QUIET", "1")
    transfer.install("cpu")
    yield transfer
    transfer.uninstall()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    """The environment for a child process: no TRANSFER_* leaking from the parent."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRANSFER_", "_TRANSFER", "SIM_ACCEL"))}
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(args, env=None, timeout=240, cwd=None, check=True):
    """Run a command, bounded by `timeout`; on failure (or hang) show its log."""
    try:
        proc = subprocess.run(args, env=env if env is not None else clean_env(), cwd=cwd or ROOT,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = (exc.stderr or b"").decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        pytest.fail(f"{args} hung for {timeout}s\n--- stdout\n{out}\n--- stderr\n{err}")
    if check and proc.returncode != 0:
        pytest.fail(f"{args} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def python(*args, **kwargs):
    return run([sys.executable, *args], **kwargs)

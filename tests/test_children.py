"""What the processes of a job inherit: the target chosen in code, and transfer-run's PYTHONPATH."""

import json
import os
import sys

import pytest

from conftest import SCRIPTS, STANDINS, NO_STANDINS, VENDORS, clean_env, free_port, python

SPAWN_AFTER_INSTALL = os.path.join(SCRIPTS, "spawn_after_install.py")


@pytest.mark.parametrize("target, backend", [
    ("cpu", "gloo"),
    pytest.param("npu", "hccl", marks=pytest.mark.skipif(not STANDINS, reason=NO_STANDINS)),
])
def test_install_in_code_reaches_spawned_workers_and_uninstall_takes_it_back(tmp_path, target, backend):
    """transfer.install(target) in the parent's main guard; mp.spawn workers never call install. As
    with TRANSFER_DEVICE, every worker runs translated: the real backend is the target's, tensors
    land on its devices, the collective sums both ranks. After uninstall a child inherits nothing."""
    out = tmp_path / "seen"
    env = clean_env(TRANSFER_QUIET=1, PYTHONPATH=VENDORS if target != "cpu" else "")
    env.pop("TRANSFER_DEVICE", None)
    proc = python(SPAWN_AFTER_INSTALL, target, str(free_port()), str(out), env=env, timeout=600)
    assert "parent done" in proc.stdout, proc.stderr
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"seen.{rank}").read_text())
        assert seen == {"TRANSFER_DEVICE": target, "backend": backend, "sum": 3.0, "available": True,
                        "device": "cpu" if target == "cpu" else f"{target}:{rank}"}, seen
    assert (tmp_path / "seen.after").read_text() == "<unset>"

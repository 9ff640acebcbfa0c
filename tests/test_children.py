"""What the processes of a job inherit: the target chosen in code, and transfer-run's PYTHONPATH."""

import json
import os
import sys

import pytest

from conftest import NO_STANDINS, SCRIPTS, STANDINS, VENDORS, clean_env, free_port, python

SPAWN_AFTER_INSTALL = os.path.join(SCRIPTS, "spawn_after_install.py")


@pytest.mark.parametrize("target, backend", [
    pytest.param("cpu", "gloo", marks=pytest.mark.slow),  # an mp.spawn job: the full suite's
    pytest.param("npu", "hccl", marks=[pytest.mark.skipif(not STANDINS, reason=NO_STANDINS), pytest.mark.slow]),
])
def test_install_in_code_reaches_spawned_workers_and_uninstall_takes_it_back(tmp_path, target, backend):
    """transfer.install(target) in the parent's main guard; mp.spawn workers never call install. As
    with TRANSFER_DEVICE, every worker runs translated: the real backend is the target's, tensors
    land on its devices, the collective sums both ranks. After uninstall a child inherits nothing."""
    out = tmp_path / "seen"
    env = clean_env(TRANSFER_QUIET=1, **({"PYTHONPATH": VENDORS} if target != "cpu" else {}))
    proc = python(SPAWN_AFTER_INSTALL, target, str(free_port()), str(out), env=env, timeout=600)
    assert "parent done" in proc.stdout, proc.stderr
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"seen.{rank}").read_text())
        assert seen == {"TRANSFER_DEVICE": target, "backend": backend, "sum": 3.0, "available": True,
                        "device": "cpu" if target == "cpu" else f"{target}:{rank}"}, seen
    assert (tmp_path / "seen.after").read_text() == "<unset>"


PATH_PROBE = """
import json, os, subprocess, sys, sysconfig
def order():
    stdlib, site = sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]
    path = [os.path.realpath(p) for p in sys.path]
    return {"PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "stdlib_first": path.index(os.path.realpath(stdlib)) < path.index(os.path.realpath(site)),
            "user_site_ran": os.environ.get("USER_SITECUSTOMIZE_RAN")}
if len(sys.argv) > 1:
    print(json.dumps(order()))
else:
    child = subprocess.run([sys.executable, __file__, "child"], capture_output=True, text=True, check=True)
    import torch
    print(json.dumps({"job": order(), "child": json.loads(child.stdout), "translated": torch.cuda.is_available()}))
"""


def test_transfer_run_adds_only_its_bootstrap_to_pythonpath_in_the_job_and_its_children(tmp_path):
    """transfer-run used to put site-packages on PYTHONPATH, ahead of the standard library, in every
    process of the job. Only the bootstrap directory may be added: the user's entries follow it in
    their order, the standard library stays ahead of site-packages, the user's sitecustomize runs."""
    from conftest import console_script, run
    from transfer.runner import BOOTSTRAP_DIR

    user_site = tmp_path / "usersite"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = 'yes'\n")
    other = tmp_path / "lib"
    other.mkdir()
    probe = tmp_path / "probe.py"
    probe.write_text(PATH_PROBE)
    env = clean_env(PYTHONPATH=os.pathsep.join([str(user_site), str(other)]))
    proc = run([console_script("transfer-run"), "--device", "cpu", sys.executable, str(probe)], env=env)
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["translated"] is True, proc.stderr
    for process in ("job", "child"):
        assert seen[process]["PYTHONPATH"].split(os.pathsep) == [BOOTSTRAP_DIR, str(user_site), str(other)], seen
        assert seen[process]["stdlib_first"] is True, seen
        assert seen[process]["user_site_ran"] == "yes", seen

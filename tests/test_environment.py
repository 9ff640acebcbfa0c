"""The environment area: CUDA/NCCL variables -> the target's, and what the report says."""

import os

import transfer


def test_nccl_socket_ifname_becomes_the_targets_and_is_reported(install_cpu):
    info = install_cpu(NCCL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME=None)
    assert info["environment"] == {"GLOO_SOCKET_IFNAME": "lo"}
    assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"
    transfer.uninstall()
    assert "GLOO_SOCKET_IFNAME" not in os.environ


def test_a_translation_inherited_from_the_launcher_is_reported_too(install_cpu):
    """torchrun's launcher (TRANSFER_DEVICE set) translated the variable; its workers inherit
    the result, and their report must still show the setting in effect."""
    info = install_cpu(NCCL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo")  # as the launcher left it
    assert info["environment"] == {"GLOO_SOCKET_IFNAME": "lo"}
    transfer.uninstall()
    assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"  # not ours to remove


def test_a_users_own_vendor_setting_wins_and_is_not_claimed(install_cpu):
    assert install_cpu(NCCL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="eth1")["environment"] == {}
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth1"
    transfer.uninstall()


# ------------------------------------------------------------------ whole processes
import json  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402

from conftest import (SCRIPTS, STANDINS, VENDORS, clean_env, free_port, kill_group, needs_standins,  # noqa: E402
                      python)
from transfer import envvars  # noqa: E402

PROBE = os.path.join(SCRIPTS, "env_probe.py")
#: What every NVIDIA container image sets (NCCL_VERSION and CUDA_VERSION as recorded on an H100 image:
#: tests/oracle/cuda_recorded.json, "nvidia_container_environment").
NVIDIA_IMAGE = {"NCCL_VERSION": "2.28.3-1", "CUDA_VERSION": "13.0.2", "CUDA_HOME": "/usr/local/cuda",
                "TORCH_CUDA_ARCH_LIST": "9.0", "NVIDIA_VISIBLE_DEVICES": "all",
                "NVIDIA_DRIVER_CAPABILITIES": "compute,utility", "NV_LIBNCCL_PACKAGE_VERSION": "2.28.3-1"}


def two_ranks(tmp_path, probe_args, timeout=300, **extra):
    """env_probe.py as ranks 0 and 1 (env:// as torchrun's workers get it); their reports and stderr."""
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE=2, RANK=rank, LOCAL_RANK=rank,
                       LOCAL_WORLD_SIZE=2, TRANSFER_QUIET=1, **extra)
        procs.append(subprocess.Popen([sys.executable, PROBE, str(tmp_path / "seen"), *probe_args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    errs, deadline = [], time.monotonic() + timeout
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                kill_group(p)
            _, err = proc.communicate()
        errs.append(err)
    assert [p.returncode for p in procs] == [0, 0], "\n---\n".join(errs)
    return [json.loads((tmp_path / f"seen.{rank}").read_text()) for rank in (0, 1)], errs


def test_what_every_nvidia_image_sets_is_informational_even_under_strict():
    """NCCL_VERSION & co. are metadata: no warning, and TRANSFER_STRICT=1 never makes `import torch`
    exit over them (it did: 'NCCL_VERSION has no equivalent for gloo')."""
    for device in ("cpu",) + (("npu",) if STANDINS else ()):
        env = clean_env(TRANSFER_DEVICE=device, TRANSFER_STRICT=1, TRANSFER_QUIET=1, **NVIDIA_IMAGE,
                       **({"PYTHONPATH": VENDORS} if device != "cpu" else {}))
        proc = python("-c", "import torch; print(torch.ones(1).cuda().device)", env=env, check=False, timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert not any(name in proc.stderr for name in NVIDIA_IMAGE), proc.stderr


def test_unsupported_variables_are_named_in_one_warning_and_strict_makes_it_an_error():
    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1, NCCL_IB_DISABLE=1, NCCL_DEBUG="INFO",
                   TORCH_NCCL_DUMP_ON_TIMEOUT=1, NCCL_VERSION="2.28.3-1")
    proc = python("-c", "import torch", env=env)
    assert proc.stderr.count("no equivalent for gloo") == 1, proc.stderr
    assert "NCCL_DEBUG, NCCL_IB_DISABLE, TORCH_NCCL_DUMP_ON_TIMEOUT have no equivalent for gloo" in proc.stderr
    assert "NCCL_VERSION" not in proc.stderr
    strict = python("-c", "import torch", env=dict(env, TRANSFER_STRICT="1"), check=False)
    assert strict.returncode != 0 and "NCCL_IB_DISABLE" in strict.stderr and "Traceback" not in strict.stderr


@needs_standins
def test_torch_nccl_error_handling_reaches_hccl_and_the_children_see_it(tmp_path):
    """Seed 004: what turns a hang into an error. torch_npu's ProcessGroupHCCL reads TORCH_HCCL_*
    (torch's names with HCCL for NCCL): each rank, and every process it starts, sees them; a
    TORCH_NCCL_* name torch_npu does not read is named in the warning."""
    show = ["TORCH_HCCL_ASYNC_ERROR_HANDLING", "TORCH_HCCL_BLOCKING_WAIT", "TORCH_HCCL_DUMP_ON_TIMEOUT",
            "TORCH_HCCL_TRACE_BUFFER_SIZE", "HCCL_SOCKET_IFNAME"]
    seen, errs = two_ranks(tmp_path, [a for n in show for a in ("--show", n)], TRANSFER_DEVICE="npu",
                           PYTHONPATH=VENDORS, TORCH_NCCL_ASYNC_ERROR_HANDLING=3, TORCH_NCCL_BLOCKING_WAIT=1,
                           TORCH_NCCL_DUMP_ON_TIMEOUT=1, TORCH_NCCL_TRACE_BUFFER_SIZE=2000,
                           TORCH_NCCL_NAN_CHECK=1, NCCL_SOCKET_IFNAME="^docker0,lo")
    expected = {"TORCH_HCCL_ASYNC_ERROR_HANDLING": "3", "TORCH_HCCL_BLOCKING_WAIT": "1",
                "TORCH_HCCL_DUMP_ON_TIMEOUT": "1", "TORCH_HCCL_TRACE_BUFFER_SIZE": "2000",
                "HCCL_SOCKET_IFNAME": "^docker0,lo"}  # CANN documents NCCL's syntax for it: as written
    for rank, report in enumerate(seen):
        assert (report["backend"], report["sum"], report["device"]) == ("hccl", 2.0, f"npu:{rank}"), report
        assert report["env"] == expected and report["child"] == expected, report
    assert "TORCH_NCCL_NAN_CHECK has no equivalent for hccl" in errs[0], errs[0]
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in errs[0] + errs[1]


@pytest.mark.slow  # a 2-rank job
def test_nccl_interface_syntax_becomes_a_name_gloo_accepts(tmp_path):
    """'^docker0' (every interface but docker0: how Kubernetes jobs write it) and '=lo' (exactly lo)
    are NCCL's syntax; gloo takes plain names and fails on '^docker0'. The loopback interface comes
    first on Linux, so both select lo here, and a two-rank job connects over it."""
    for value in ("^docker0", "=lo"):
        seen, errs = two_ranks(tmp_path, ["--show", "GLOO_SOCKET_IFNAME"], TRANSFER_DEVICE="cpu",
                               NCCL_SOCKET_IFNAME=value)
        for report in seen:
            assert (report["backend"], report["sum"]) == ("gloo", 2.0), report
            assert report["env"] == report["child"] == {"GLOO_SOCKET_IFNAME": "lo"}, (value, report)


def test_an_interface_selection_that_leaves_none_fails_at_init_and_says_why():
    """Excluding every interface of the host: NCCL finds no socket interface and fails at init; so does
    the translated job, with the variable, its value and the interfaces named."""
    names = [name for _, name in socket.if_nameindex()]
    value = "^=" + ",".join(names)
    code = (f"import torch, torch.distributed as dist\n"
            f"dist.init_process_group('nccl', init_method='tcp://127.0.0.1:{free_port()}', rank=0, world_size=1)\n")
    proc = python("-c", code, env=clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1, NCCL_SOCKET_IFNAME=value),
                  check=False, timeout=120)
    assert proc.returncode != 0
    assert f"NCCL_SOCKET_IFNAME={value!r} selects none of this host's interfaces" in proc.stderr, proc.stderr


def test_set_after_import_torch_and_before_init_process_group_takes_effect(tmp_path):
    """Legal on CUDA, whose initialisation is lazy: a script configures NCCL in code after `import
    torch`. An interface that does not exist must then fail the job as it would on CUDA, naming it;
    a real one carries it (the translation used to happen once, at install, and ignore both)."""
    code = (f"import os, torch, torch.distributed as dist\n"
            f"os.environ['NCCL_SOCKET_IFNAME'] = 'nosuchif0'\n"
            f"dist.init_process_group('nccl', init_method='tcp://127.0.0.1:{free_port()}', rank=0, world_size=1)\n"
            f"print('initialised')\n")
    proc = python("-c", code, env=clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1), check=False, timeout=120)
    assert proc.returncode != 0 and "initialised" not in proc.stdout
    assert "nosuchif0" in proc.stderr and "GLOO_SOCKET_IFNAME=nosuchif0" in proc.stderr, proc.stderr
    seen, _ = two_ranks(tmp_path, ["--set", "NCCL_SOCKET_IFNAME==lo", "--show", "GLOO_SOCKET_IFNAME"],
                        TRANSFER_DEVICE="cpu")
    assert all(r["env"] == r["child"] == {"GLOO_SOCKET_IFNAME": "lo"} for r in seen), seen


def test_a_collective_variable_set_after_the_first_process_group_is_too_late_and_said(tmp_path):
    seen, errs = two_ranks(tmp_path, ["--late", "NCCL_SOCKET_IFNAME=lo"], TRANSFER_DEVICE="cpu")
    assert "NCCL_SOCKET_IFNAME was set to 'lo' after the first process group was created" in errs[0], errs[0]
    assert "after the first process group" not in errs[1]  # one warning per job: rank 0


@needs_standins
def test_visible_devices_set_after_the_plugin_was_imported_is_too_late_and_said():
    """On CUDA, CUDA_VISIBLE_DEVICES set after `import torch` counts until the first CUDA call. The
    vendor plug-in is imported at install and has read its devices: the script gets a warning, and
    the device count it sees is the one the plug-in read."""
    code = ("import os, torch\n"
            "os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n"
            "print('devices', torch.cuda.device_count())\n")
    env = clean_env(TRANSFER_DEVICE="npu", PYTHONPATH=VENDORS, TRANSFER_QUIET=1, SIM_ACCEL_DEVICE_COUNT=4)
    proc = python("-c", code, env=env, timeout=600)
    assert "devices 4" in proc.stdout
    assert "CUDA_VISIBLE_DEVICES was set to '1' after torch_npu was imported" in proc.stderr, proc.stderr
    before = python("-c", "import torch; print('devices', torch.cuda.device_count())",
                    env=dict(env, CUDA_VISIBLE_DEVICES="1"), timeout=600)
    assert "devices 1" in before.stdout and "after torch_npu was imported" not in before.stderr


def test_a_launcher_and_the_workers_it_starts_name_an_unsupported_variable_once():
    """torchrun's (or accelerate's) launcher runs transfer too and names the variables it cannot translate;
    rank 0, which inherits the same variables, does not name them again (it did: two warnings per job, and
    a TORCH_NCCL_ASYNC_ERROR_HANDLING the user set was called the launcher's default there)."""
    worker = ("import os, subprocess, sys; subprocess.run([sys.executable, '-c', 'import torch'], check=True, "
              "env=dict(os.environ, RANK='0', LOCAL_RANK='0', TORCHELASTIC_RUN_ID='job'))")
    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1, NCCL_IB_DISABLE=1, NCCL_DEBUG="INFO")
    proc = python("-c", "import torch; " + worker, env=env, timeout=300)
    assert proc.stderr.count("NCCL_DEBUG, NCCL_IB_DISABLE have no equivalent for gloo") == 1, proc.stderr
    assert "no equivalent" not in proc.stderr.replace("NCCL_DEBUG, NCCL_IB_DISABLE have no equivalent", ""), proc.stderr
    alone = python("-c", worker, env=env, timeout=300)  # a worker whose launcher said nothing names them itself
    assert alone.stderr.count("NCCL_DEBUG, NCCL_IB_DISABLE have no equivalent for gloo") == 1, alone.stderr


@needs_standins
def test_a_launchers_default_is_not_an_error_under_strict():
    """torch.distributed.run sets TORCH_NCCL_ASYNC_ERROR_HANDLING=1 in every worker the user did not
    set it for; tccl's counterpart is not known, which is worth a warning but is not the user's doing."""
    env = clean_env(TRANSFER_DEVICE="sdaa", PYTHONPATH=VENDORS, TRANSFER_QUIET=1, TRANSFER_STRICT=1,
                   TORCHELASTIC_RUN_ID="job", TORCH_NCCL_ASYNC_ERROR_HANDLING=1)
    proc = python("-c", "import torch; print('ran')", env=env, check=False, timeout=600)
    assert proc.returncode == 0 and "ran" in proc.stdout, proc.stderr
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING has no equivalent for tccl" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value, available, expected", [
    # NCCL's documented selection (docs.nvidia.com/deeplearning/nccl, NCCL_SOCKET_IFNAME): prefixes,
    # '=' exact names, '^' exclusion; the first interface the host lists wins for gloo.
    ("eth", ["lo", "eth0", "eth1"], "eth0"),
    ("=eth1", ["lo", "eth0", "eth1"], "eth1"),
    ("=eth", ["lo", "eth0", "eth1"], "eth"),  # no interface is called 'eth': gloo names it in its error
    ("^docker,lo", ["lo", "docker0", "ens1"], "ens1"),
    ("^=docker0", ["docker0", "docker1"], "docker1"),
    ("ib,eth", ["lo", "eth0", "ib0"], "eth0"),
])
def test_nccl_interface_selection(value, available, expected):
    assert envvars.plain_interface(value, available) == expected


def test_every_classified_variable_has_one_class_per_target():
    from transfer.profiles import PROFILES

    classes = {envvars.INFORMATIONAL, envvars.NOT_NEEDED, envvars.TRANSLATED, envvars.BUILT_IN, envvars.UNSUPPORTED}
    for name, row in envvars.rows(PROFILES):
        for profile, verdict in row.items():
            assert verdict.cls in classes, (name, profile)
            assert (verdict.cls == envvars.TRANSLATED) == (verdict.target is not None), (name, profile)
    assert envvars.classify(PROFILES["cpu"], "CUDA_PKG_VERSION").cls == envvars.INFORMATIONAL
    assert envvars.classify(PROFILES["cpu"], "CUDA_MPS_PIPE_DIRECTORY").cls == envvars.UNSUPPORTED

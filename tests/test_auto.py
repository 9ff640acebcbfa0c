"""`auto` with a vendor plug-in that is installed but broken or without devices.

The fake plug-ins are written into a temporary directory on PYTHONPATH, one per test, and only
ever imported by child processes. Every child hides CUDA (CUDA_VISIBLE_DEVICES=''): with a real GPU,
auto stands aside for it."""

import pytest

from conftest import clean_env, python

#: What torch_npu does on an Ascend server where CANN's set_env.sh was not sourced: its package
#: imports torch, then its C extension, whose shared libraries the loader cannot find (the real
#: 2.13.0 wheel fails the same way here, naming libhccl.so, the first library it lacks).
CANN_MISSING = "libascendcl.so: cannot open shared object file: No such file or directory"
TRAIN = ("from transfer import auto as _\n"
         "import torch\n"
         "print('trained on', torch.ones(1).cuda().device)\n")


def broken_torch_npu(root):
    package = root / "torch_npu"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import torch\nfrom . import _C\n")
    (package / "_C.py").write_text(f"raise ImportError({CANN_MISSING!r})\n")
    return root


def test_auto_refuses_an_installed_vendor_that_fails_to_import_and_names_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = clean_env(CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(broken_torch_npu(tmp_path / "site")))
    proc = python(str(script), env=env, check=False)
    assert proc.returncode != 0, proc.stdout
    assert "trained on" not in proc.stdout and "CUDA calls run on cpu" not in proc.stderr, proc.stderr
    assert "torch_npu" in proc.stderr and CANN_MISSING in proc.stderr, proc.stderr
    assert "set_env.sh" in proc.stderr and "TRANSFER_DEVICE=cpu" in proc.stderr, proc.stderr


def test_the_environment_way_refuses_too_without_a_traceback(tmp_path):
    env = clean_env(CUDA_VISIBLE_DEVICES="", TRANSFER_DEVICE="auto",
                       PYTHONPATH=str(broken_torch_npu(tmp_path / "site")))
    proc = python("-c", "import torch; print('ran')", env=env, check=False)
    assert proc.returncode != 0 and "ran" not in proc.stdout
    assert CANN_MISSING in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_asking_for_the_cpu_still_runs_on_the_cpu(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = clean_env(CUDA_VISIBLE_DEVICES="", TRANSFER_DEVICE="cpu",
                       PYTHONPATH=str(broken_torch_npu(tmp_path / "site")))
    assert "trained on cpu" in python(str(script), env=env).stdout


def test_a_vendor_without_devices_is_named_when_auto_falls_back(tmp_path):
    """torch_sdaa imports but sees no device (a machine without the card): auto runs on the CPU, as a
    CUDA build of torch does without a GPU, and says which plug-in it passed over and why."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "torch_sdaa.py").write_text("import torch\n")  # no torch.sdaa: no device
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    proc = python(str(script), env=clean_env(CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(site)))
    assert "trained on cpu" in proc.stdout
    assert "auto skips torch_sdaa (Tecorigin)" in proc.stderr and "reports no sdaa device" in proc.stderr, proc.stderr

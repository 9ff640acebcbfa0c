"""The three ways in, each in a fresh interpreter, and the bad inputs."""

import os
import re
import sys

import pytest

from conftest import EXAMPLES, NO_GPU, clean_env, console_script, python, run

pytestmark = pytest.mark.compat  # every way in, from the installed wheel, on every torch of the matrix

TRAIN = os.path.join(EXAMPLES, "train_cuda.py")
PROBE = "import torch; print('cuda', torch.cuda.is_available(), torch.ones(1).cuda().device)"


def assert_trained(proc):
    assert "outputs identical: True" in proc.stdout, proc.stdout + proc.stderr
    assert "epoch 0: loss" in proc.stdout
    # The closing "done in X s" covers the whole run, so at least the epochs it timed (it once said 0.00s).
    epochs_ms = [float(ms) for ms in re.findall(r"^epoch \d+: .* time ([\d.]+) ms", proc.stdout, re.MULTILINE)]
    (total,) = re.findall(r"^done in ([\d.]+)s$", proc.stdout, re.MULTILINE)
    assert epochs_ms and float(total) >= sum(epochs_ms) / 1000 > 0, proc.stdout


@pytest.mark.slow
def test_import_line(tmp_path):
    script = tmp_path / "train_with_import.py"
    script.write_text("from transfer import auto as _\n" + open(TRAIN).read())
    proc = python(str(script), "--epochs", "1", "--workdir", str(tmp_path), env=clean_env(TRANSFER_DEVICE="cpu"))
    assert_trained(proc)


def test_import_line_defaults_to_auto_which_is_cpu_here(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("from transfer import auto as _\n" + PROBE + "\n")
    proc = python(str(script), env=clean_env(**NO_GPU))  # "here": no GPU (auto stands aside for real CUDA)
    assert "cuda True cpu" in proc.stdout


@pytest.mark.slow
def test_environment_variable_alone(tmp_path):
    proc = python(TRAIN, "--epochs", "1", "--workdir", str(tmp_path), env=clean_env(TRANSFER_DEVICE="cpu"))
    assert_trained(proc)
    assert proc.stderr.count("transfer: CUDA calls run on cpu") == 1  # one banner


@pytest.mark.parametrize("first", ["transfer.plan", "transfer.patches.collectives", "transfer.cpu.target"])
def test_environment_variable_with_a_transfer_module_imported_first(first):
    """A program whose first import is one of transfer's modules that import torch (a tool calling the
    rehearsal, a plug-in reading the patches) reaches torch's entry points mid-import: transfer installs once
    that import ends, instead of failing with a circular import through torch's backend loading."""
    proc = python("-c", f"import {first}\n" + PROBE, env=clean_env(TRANSFER_DEVICE="cpu", **NO_GPU))
    assert proc.returncode == 0 and "cuda True cpu" in proc.stdout, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("transfer: CUDA calls run on cpu") == 1


def test_environment_variable_unset_changes_nothing():
    code = "import torch; print(torch.cuda.is_available(), 'is_cuda' in torch.Tensor.__dict__)"
    proc = python("-c", code, env=clean_env(**NO_GPU))  # torch's own answer without a GPU: False
    assert proc.stdout.split() == ["False", "False"]


def test_transfer_run_chains_the_users_sitecustomize(tmp_path):
    user_site = tmp_path / "usersite"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = 'yes'\n")
    script = tmp_path / "probe.py"
    script.write_text(PROBE + "\nimport os\nprint('user site', os.environ.get('USER_SITECUSTOMIZE_RAN'))\n")
    launcher = console_script("transfer-run")
    env = clean_env(PYTHONPATH=str(user_site), TORCH_DEVICE_BACKEND_AUTOLOAD="0")  # the bootstrap alone
    proc = run([launcher, "--device", "cpu", sys.executable, str(script)], env=env)
    assert "cuda True cpu" in proc.stdout and "user site yes" in proc.stdout


@pytest.mark.slow
def test_transfer_run_trains_the_example(tmp_path):
    proc = run([console_script("transfer-run"), "-d", "cpu", sys.executable, TRAIN, "--epochs", "1",
                "--workdir", str(tmp_path)])
    assert_trained(proc)


@pytest.mark.slow
def test_python_dash_m_transfer(tmp_path):
    proc = python("-m", "transfer", "--device", "cpu", TRAIN, "--epochs", "1", "--workdir", str(tmp_path),
                  env=clean_env(TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert_trained(proc)


def test_unknown_device_fails_at_torch_import_not_at_startup():
    env = clean_env(TRANSFER_DEVICE="tpu")
    assert python("-c", "print('plain python works')", env=env).stdout.strip() == "plain python works"
    proc = python("-c", "import torch", env=env, check=False)
    assert proc.returncode != 0
    assert "TRANSFER_DEVICE='tpu' is not a known target" in proc.stderr
    from transfer.profiles import CHOICES
    assert ", ".join(CHOICES) in proc.stderr


def test_transfer_run_rejects_an_unknown_device():
    proc = run([console_script("transfer-run"), "--device", "tpu", sys.executable, "-c", "pass"], check=False)
    assert proc.returncode == 2 and "not a known target" in proc.stderr


def test_missing_vendor_package_names_it_and_the_fix():
    proc = python("-c", "import torch", env=clean_env(TRANSFER_DEVICE="sdaa"), check=False)
    assert proc.returncode != 0
    assert "torch_sdaa" in proc.stderr and "cannot be imported" in proc.stderr and "TRANSFER_DEVICE=cpu" in proc.stderr


def test_off_disables():
    proc = python("-c", "import torch; print(torch.cuda.is_available())", env=clean_env(TRANSFER_DEVICE="off"))
    assert proc.stdout.strip() == "False"


def test_out_of_range_device_on_cpu_target():
    code = "import torch; torch.zeros(1, device='cuda:7')"
    proc = python("-c", code, env=clean_env(TRANSFER_DEVICE="cpu", TRANSFER_CPU_DEVICES="2"), check=False)
    assert proc.returncode != 0 and "invalid device ordinal cuda:7" in proc.stderr


def test_vendor_without_devices_and_visible_devices_set_before_its_import(tmp_path):
    fake = tmp_path / "fake_vendor"
    fake.mkdir()
    # A torch_sdaa that imports but has no device: it records what it saw at import.
    (fake / "torch_sdaa.py").write_text(
        "import os\nopen(os.environ['PROBE_OUT'], 'w').write(os.environ.get('SDAA_VISIBLE_DEVICES', '<unset>'))\n")
    probe = tmp_path / "seen.txt"
    env = clean_env(TRANSFER_DEVICE="sdaa", PYTHONPATH=str(fake), CUDA_VISIBLE_DEVICES="1,2", PROBE_OUT=str(probe))
    proc = python("-c", "import torch", env=env, check=False)
    assert proc.returncode != 0
    assert "torch_sdaa is installed but reports no sdaa device" in proc.stderr
    assert "TRANSFER_DEVICE=cpu" in proc.stderr
    assert probe.read_text() == "1,2"


@pytest.mark.parametrize("where", ["a file", "/proc"])
def test_a_bad_log_path_is_one_line_naming_the_variable_not_a_torch_traceback(tmp_path, where):
    """TRANSFER_LOG naming a file, or a folder nobody can create, used to break
    `import torch` with a traceback ending in torch's backend-autoload advice."""
    if where == "a file":
        path = tmp_path / "t.log"
        path.write_text("")
    else:
        path = "/proc/transfer-nope"
    proc = python("-c", "import torch", env=clean_env(TRANSFER_DEVICE="cpu", TRANSFER_LOG=str(path)), check=False)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"transfer: TRANSFER_LOG='{path}'"), proc.stderr
    assert "directory you can write" in lines[0], proc.stderr  # the fix
    assert "Traceback" not in proc.stderr and "TORCH_DEVICE_BACKEND_AUTOLOAD" not in proc.stderr


def test_transfer_run_runs_a_python_file_without_python_and_points_transfer_run_out(tmp_path):
    """`transfer-run train.py` once said "No such file or directory" about a file that exists;
    it runs it with the current interpreter, as `python -m transfer train.py` does. `transfer run x.py`
    names transfer-run."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE + "\nimport sys\nprint('args', sys.argv[1:])\n")
    proc = run([console_script("transfer-run"), "--device", "cpu", str(script), "--epochs", "1"],
               env=clean_env(**NO_GPU))
    assert "cuda True cpu" in proc.stdout and "args ['--epochs', '1']" in proc.stdout, proc.stdout + proc.stderr
    wrong = run([console_script("transfer"), "run", str(script)], check=False)
    assert wrong.returncode == 2 and "invalid choice" not in wrong.stderr
    assert f"transfer-run [--device X] {script}" in wrong.stderr, wrong.stderr


def test_transfer_run_device_errors_name_the_flag_and_the_closest_target():
    """A typo of --device gets "did you mean" (TRANSFER_DEVICE's too: test_install.py); the messages of a
    job started with --device name the flag the user typed, not TRANSFER_DEVICE."""
    typo = run([console_script("transfer-run"), "--device", "nup", sys.executable, "-c", "pass"], check=False)
    assert typo.returncode == 2 and "--device 'nup' is not a known target. Did you mean 'npu'?" in typo.stderr, \
        typo.stderr
    assert "TRANSFER_DEVICE" not in typo.stderr
    missing = run([console_script("transfer-run"), "--device", "sdaa", sys.executable, "-c", "import torch"],
                  check=False)
    assert missing.returncode != 0 and "--device sdaa needs" in missing.stderr, missing.stderr
    assert "To run on the CPU instead: --device cpu" in missing.stderr and "TRANSFER_DEVICE" not in missing.stderr

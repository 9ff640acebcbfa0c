"""What `pip install cuda-transfer` gives a user: the name, the files, the dependency rule, the .pth gate,
a working `transfer port`.

The nox sessions run these against the installed wheel on every torch of the matrix
(TESTING_INSTALLED_TRANSFER=1, WHEEL_UNDER_TEST=<the wheel>); from a checkout they build a wheel.
"""

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

import transfer
from conftest import EXAMPLES, INSTALLED, ROOT, clean_env, python

pytestmark = pytest.mark.compat

PROBE = "import torch; print('cuda', torch.cuda.is_available(), torch.ones(1).cuda().device)"
#: The distribution on PyPI (`transfer` there is an unrelated project); the import name stays transfer.
DISTRIBUTION = "cuda-transfer"
WHEEL_NAME = DISTRIBUTION.replace("-", "_")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    path = os.environ.get("WHEEL_UNDER_TEST")
    if path:
        return path
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    ROOT], check=True, capture_output=True)
    (path,) = glob.glob(str(out / f"{WHEEL_NAME}-*.whl"))
    return path


def test_the_wheel_ships_the_gate_and_the_bootstrap(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "transfer.pth" in names  # top level: site runs it at start-up
    assert "transfer/bootstrap/sitecustomize.py" in names  # transfer-run's PYTHONPATH entry
    gate = zipfile.ZipFile(wheel).read("transfer.pth").decode()
    assert gate.count("\n") == 1 and gate.startswith("import ")  # one line, executed by site


def test_the_wheel_ships_every_file_of_the_package(wheel):
    """What the checkout's package holds (modules, data, the C source of transfer._fastcalls) is what users
    install; build outputs (.so, .pyc) are the wheel's own business."""
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = []
    for folder, dirs, files in os.walk(os.path.join(ROOT, "transfer")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith((".pyc", ".so", ".pyd")):
                path = os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/")
                if path not in names:
                    missing.append(path)
    assert not missing, missing


def test_the_wheel_is_one_abi3_build_with_the_c_stand_ins(wheel):
    """transfer._fastcalls uses Python 3.8's limited API: one cp38-abi3 wheel serves 3.8-3.12. It is
    optional (no compiler: a pure wheel, the Python wrappers), so a pure wheel passes too, but only
    where no C compiler is on PATH: with one (CI) a build that silently fell back would test nothing of it."""
    import shutil

    names = zipfile.ZipFile(wheel).namelist()
    tag = os.path.basename(wheel).split("-", 2)[2]
    if tag.startswith("py3-none-any"):
        assert not (shutil.which("cc") or shutil.which("gcc")), f"a C compiler is here, yet the wheel is pure: {tag}"
        assert not [n for n in names if ("_fastcalls" in n or "_watch" in n) and n.endswith((".so", ".pyd"))]
        return
    assert tag.startswith("cp38-abi3-"), tag
    assert [n for n in names if n.startswith("transfer/_fastcalls.") and n.endswith((".abi3.so", ".pyd"))], names
    # the accuracy mode's per-operation path (transfer/compare/watch.py), built the same way
    assert [n for n in names if n.startswith("transfer/compare/_watch.") and n.endswith((".abi3.so", ".pyd"))], names


def test_the_copy_under_test_is_the_installed_one():
    here = os.path.dirname(os.path.abspath(transfer.__file__))
    # A child started in the checkout (cwd on sys.path for -c) finds the same copy.
    child = python("-c", "import transfer, os; print(os.path.dirname(os.path.abspath(transfer.__file__)))")
    assert child.stdout.strip() == here
    purelib = sysconfig.get_paths()["purelib"]
    if INSTALLED:
        assert here == os.path.join(purelib, "transfer") and not here.startswith(ROOT)
        assert os.path.exists(os.path.join(purelib, "transfer.pth"))
        assert os.path.exists(os.path.join(here, "bootstrap", "sitecustomize.py"))
    else:
        assert here == os.path.join(ROOT, "transfer")


def fake_distribution(site: str, name: str, version: str) -> None:
    """Metadata of an installed distribution (no code): what pip reads to decide."""
    info = os.path.join(site, f"{name}-{version}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as fh:
        fh.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for file, text in (("INSTALLER", "pip\n"), ("RECORD", ""), ("top_level.txt", f"{name}\n")):
        with open(os.path.join(info, file), "w") as fh:
            fh.write(text)


def pip_install_over(tmp_path, wheel, torch_version):
    """`pip install <wheel>` into a venv already holding torch `torch_version`; offline."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    fake_distribution(site, "torch", torch_version)
    fake_distribution(site, "wrapt", "1.16.0")
    # No configured index or find-links (this machine sets PIP_FIND_LINKS): nothing but the wheel.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                           "--no-index", "--disable-pip-version-check", wheel], capture_output=True, text=True, env=env)
    listed = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "list",
                             "--format=freeze", "--disable-pip-version-check"], capture_output=True, text=True)
    return proc, dict(line.split("==") for line in listed.stdout.split())


@pytest.mark.slow
@pytest.mark.parametrize("torch_version", ["2.0.1", "2.1.0+cpu", "2.1.0a0+git1234", "2.4.1", "2.14.1"])
def test_pip_install_leaves_the_users_torch_in_place(tmp_path, wheel, torch_version):
    proc, installed = pip_install_over(tmp_path, wheel, torch_version)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert installed["torch"] == torch_version and DISTRIBUTION in installed


def fake_wheel(folder, name: str, version: str, requires=()) -> str:
    """A wheel holding only metadata (no code), for pip's resolver to choose from offline."""
    path = os.path.join(str(folder), f"{name}-{version}-py3-none-any.whl")
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return path


def dry_run(tmp_path, installed_torch, requirements, index):
    """What pip's resolver plans for `pip install REQUIREMENTS` over a fresh venv holding torch
    `installed_torch`, offline with `index` as the only source: (returncode, {name: version}, output)."""
    venv = tmp_path / f"venv-{installed_torch}-{len(os.listdir(tmp_path))}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    fake_distribution(site, "torch", installed_torch)
    report = venv / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                           "--dry-run", "--report", str(report), "--no-index", "--find-links", str(index),
                           "--disable-pip-version-check", *requirements], capture_output=True, text=True, env=env)
    planned = {}
    if report.exists():
        import json

        planned = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.load(open(report))["install"]}
    return proc.returncode, planned, proc.stdout + proc.stderr


@pytest.mark.slow  # four venvs and pip resolves, ~14 s
def test_the_npu_fix_never_replaces_the_users_torch(tmp_path, wheel):
    """torch_npu is released per torch release and requires exactly it (torch_npu 2.14.0:
    `torch==2.14.0.*`, read on PyPI); there is none for torch 2.14.1. `pip install 'cuda-transfer[npu]'`,
    the fix the npu error message printed, made pip swap a user's torch 2.14.1 for 2.14.0. Now there is no
    such extra, and the command the message prints installs the torch_npu of the installed torch or fails
    saying there is none; pip's resolver (offline, over these metadata-only wheels) never plans a torch."""
    index = tmp_path / "index"
    index.mkdir()
    for version in ("2.13.0", "2.14.0"):
        fake_wheel(index, "torch", version)
        fake_wheel(index, "torch_npu", version, [f"torch=={version}.*"])
    fake_wheel(index, "wrapt", "1.16.0")
    shutil.copy(wheel, index)
    code, planned, said = dry_run(tmp_path, "2.14.1", [f"{DISTRIBUTION}[npu]"], index)
    assert code == 0 and "torch" not in planned and "torch_npu" not in planned, said  # the extra is gone
    assert "does not provide the extra 'npu'" in said
    from transfer.profiles import PROFILES
    from transfer.selection import install_hint

    for installed, has_match in (("2.14.1", False), ("2.14.0+cpu", True), ("2.13.0", True)):
        hint = install_hint(PROFILES["npu"], installed)
        command = shlex.split(hint.split(" (", 1)[0])
        assert command[:2] == ["pip", "install"], hint
        code, planned, said = dry_run(tmp_path, installed, command[2:], index)
        assert "torch" not in planned, (hint, said)  # never a swap
        if has_match:
            assert code == 0 and planned.get("torch_npu") == installed.split("+")[0], (hint, said)
        else:
            assert code != 0 and "torch_npu==2.14.1.*" in said, (hint, said)  # pip says there is none


def test_the_distribution_is_ours_and_the_import_name_transfer(wheel):
    archive = zipfile.ZipFile(wheel)
    (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    fields = [line.split(": ", 1) for line in archive.read(metadata).decode().split("\n\n")[0].splitlines()
              if ": " in line]
    assert ["Name", DISTRIBUTION] in fields
    requires = [value for key, value in fields if key == "Requires-Dist"]
    assert not any(r.startswith("torch_npu") for r in requires), requires  # no [npu]: it would replace torch
    packages = {n.split("/")[0] for n in archive.namelist() if "/" in n and not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"transfer"}


@pytest.mark.slow
def test_pip_install_does_want_a_torch_from_2_0(tmp_path, wheel):
    # The control: pip does check torch (offline, so it cannot fetch the newer one it wants).
    proc, installed = pip_install_over(tmp_path, wheel, "1.13.1")
    assert proc.returncode != 0 and re.search(r"torch>=2\.0", proc.stdout + proc.stderr), proc.stderr
    assert installed["torch"] == "1.13.1"


def test_gate_costs_one_lookup_when_unset():
    code = "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in ('transfer', 'wrapt', 'torch')))"
    assert python("-c", code).stdout.strip() == "[]"


def test_gate_leaves_programs_without_torch_alone():
    code = "import json, sys; print(json.dumps([1]), 'torch' in sys.modules)"
    proc = python("-c", code, env=clean_env(TRANSFER_DEVICE="cpu"))
    assert proc.stdout.strip() == "[1] False" and proc.stderr == ""


def test_env_alone_activates_without_torchs_autoload():
    # torch < 2.5 has no backend autoload; on newer torch it can be switched off: the .pth gate does it.
    proc = python("-c", PROBE, env=clean_env(TRANSFER_DEVICE="cpu", TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert "cuda True cpu" in proc.stdout
    assert proc.stderr.count("transfer: CUDA calls run on cpu") == 1


def test_one_install_where_the_gate_and_the_autoload_both_fire():
    code = PROBE + "\nimport transfer; p = transfer.status()['patches']; print('patches', len(p), len(set(p)))"
    proc = python("-c", code, env=clean_env(TRANSFER_DEVICE="cpu"))
    assert "cuda True cpu" in proc.stdout
    count, unique = re.search(r"patches (\d+) (\d+)", proc.stdout).groups()
    assert count == unique and int(count) > 100
    assert proc.stderr.count("transfer: CUDA calls run on cpu") == 1


def test_a_broken_transfer_never_breaks_python(tmp_path):
    broken = tmp_path / "shadow" / "transfer"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise RuntimeError('half-deleted install')\n")
    proc = python("-c", "print('python works')", env=clean_env(TRANSFER_DEVICE="cpu",
                                                                PYTHONPATH=str(broken.parent)))
    assert proc.stdout.strip() == "python works"
    assert "TRANSFER_DEVICE is set, but transfer cannot be imported" in proc.stderr
    assert "half-deleted install" in proc.stderr and "unset TRANSFER_DEVICE" in proc.stderr


@pytest.mark.slow
def test_mp_spawn_workers_activate_from_env_alone(tmp_path):
    from conftest import free_port

    env = clean_env(TRANSFER_DEVICE="cpu", TORCH_DEVICE_BACKEND_AUTOLOAD="0", TRANSFER_CPU_DEVICES="2")
    proc = python(os.path.join(EXAMPLES, "spawn_ddp.py"), "--workdir", str(tmp_path), "--port", str(free_port()),
                  env=env, timeout=300)
    digests = set(re.findall(r"rank (\d+): parameters ([0-9a-f]{16}) on cpu", proc.stdout))
    assert {rank for rank, _ in digests} == {"0", "1"} and len({d for _, d in digests}) == 1, proc.stdout


@pytest.mark.slow
def test_pip_install_then_transfer_port_in_a_fresh_venv(tmp_path, wheel):
    """`pip install cuda-transfer` (this wheel, found by name) into a fresh venv, then `transfer port` of the
    examples. torch is a fake distribution here (port never imports it: nox -s quickstart installs a real one);
    wrapt comes from the package index, as a user gets it."""
    index = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(tmp_path / "probe"),
                            "wrapt>=1.14"], capture_output=True, text=True, env=clean_env(), timeout=300)
    if index.returncode != 0:
        pytest.skip(f"no package index reachable to install wrapt from: {index.stderr.strip()[-200:]}")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    fake_distribution(site, "torch", "2.14.1")
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--find-links",
                           os.path.dirname(wheel), DISTRIBUTION], capture_output=True, text=True, env=clean_env(),
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "p"
    port = subprocess.run([str(venv / "bin" / "transfer"), "port", EXAMPLES, "--device", "npu", "--out", str(out)],
                          capture_output=True, text=True, env=clean_env(), cwd=str(tmp_path), timeout=300)
    assert port.returncode == 0 and "Traceback" not in port.stderr, port.stdout + port.stderr
    assert "Transformed" in port.stderr and "Failed 0" in port.stderr, port.stderr
    ported = (out / "train_cuda.py").read_text()
    assert "import torch_npu" in ported and '.to("npu"' in ported
    assert sorted(p.name for p in out.glob("*.py")) == sorted(n for n in os.listdir(EXAMPLES) if n.endswith(".py"))


_OBJECTS_WITHOUT_NUMPY = r"""
import os, sys
sys.modules["numpy"] = None  # pip's torch, which does not install NumPy
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
gathered = [None]
dist.all_gather_object(gathered, {"lr": 0.05})  # what spawn_ddp.py's ranks do, and broadcast_object_list's receivers
print("gathered", gathered)
"""


@pytest.mark.slow
def test_numpy_is_torchs_own_need_and_the_quick_start_says_to_install_it(tmp_path):
    """The quick start's environment once had no NumPy and examples/spawn_ddp.py failed in
    broadcast_object_list with "Numpy is not available". That is torch's own need, without transfer (a receiving
    rank calls tensor.numpy(): all_gather_object in one process shows it), and transfer runs without NumPy: it
    stays out of the dependencies (it would put NumPy 2 beside a torch < 2.3), and the quick start and the
    example say to install it."""
    script = tmp_path / "objects.py"
    script.write_text(_OBJECTS_WITHOUT_NUMPY)
    native = python(str(script), str(tmp_path / "store"), env=clean_env(), check=False, timeout=120)
    assert native.returncode != 0 and "RuntimeError: Numpy is not available" in native.stderr, native.stderr
    shim = python("-c", "import sys; sys.modules['numpy'] = None\n" + PROBE, env=clean_env(TRANSFER_DEVICE="cpu"))
    assert "cuda True cpu" in shim.stdout  # transfer itself does not need it
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "`pip install numpy`" in quick_start and "Numpy is not available" in quick_start
    assert "pip install numpy" in open(os.path.join(EXAMPLES, "spawn_ddp.py")).read().split('"""')[1]
    requires = re.search(r"install_requires =\n((?:    .*\n)+)", open(os.path.join(ROOT, "setup.cfg")).read())
    assert "numpy" not in requires.group(1)

"""Test sessions: the wheel users install, on the torch versions they have.

    nox -s tests                 the full suite on the default torch (2.13.0, Python 3.11)
    nox -s compat                the compat suite on the CI pairs (torch 2.0.1/Py 3.8, 2.1.2/3.10, 2.14.1/3.12)
    nox -s compat -- 2.6.0 2.9.1 ... on those torch versions (each with its Python from TORCH_PYTHON)
    nox -s compat -- all         ... on every minor release from 2.0 to 2.14 (about 15 x 5 GB of venvs)
    nox -s quickstart            the README's quick start on a fresh environment with no torch

Every session builds the wheel from this checkout, installs it (with its
dependencies, so the dependency specification is exercised) into a fresh
virtual environment that already holds the torch under test, checks that
installing left that torch exactly as it was, and runs the tests from a copy
of tests/ + examples/ + benchmarks/ outside the checkout: ``import transfer``
can only find the installed copy (TESTING_INSTALLED_TRANSFER=1 makes the suite
assert it). Virtual environments live in .nox/<session>-torch-<version>;
one is reused when it already holds that torch (TRANSFER_NOX_FRESH=1 rebuilds).
`nox -s compat --install-only` prepares the environments without testing
(.ci/run does that in the background while the full suite runs).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time

import nox

nox.options.sessions = ["tests", "compat", "quickstart"]
nox.options.download_python = "never"

ROOT = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(ROOT, ".nox")

#: The torch releases we support, each with the Python it is tested on. Together they span
#: Python 3.8-3.12; each pair is one torch ships a wheel for (2.5+ has none for 3.8).
TORCH_PYTHON = {
    "2.0.1": "3.8",
    "2.1.2": "3.10",
    "2.2.2": "3.9",
    "2.3.1": "3.11",
    "2.4.1": "3.8",
    "2.5.1": "3.9",
    "2.6.0": "3.10",
    "2.7.1": "3.12",
    "2.8.0": "3.11",
    "2.9.1": "3.12",
    "2.10.0": "3.10",
    "2.11.0": "3.12",
    "2.12.0": "3.11",
    "2.13.0": "3.11",  # the local CPU build: the default torch of `nox -s tests`
    "2.14.1": "3.12",
}
DEFAULT_TORCH = "2.13.0"
CI_PAIRS = ("2.0.1", "2.1.2", "2.14.1")
TEST_TREE = ("tests", "examples", "benchmarks", "docs", "README.md", "CHANGELOG.md", "setup.cfg")
TEST_REQUIREMENTS = ["pytest>=7", "ninja", "setuptools", "hypothesis>=6", "libcst>=1.0", "safetensors"]


def find_python(version: str) -> str:
    """The interpreter for "X.Y": on PATH, else under pyenv (whose shims refuse versions not selected)."""
    candidates = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    found = shutil.which(f"python{version}")
    for path in [*candidates[::-1], *([found] if found else [])]:
        if subprocess.run([path, "-c", "pass"], capture_output=True).returncode == 0:
            return path
    raise nox.command.CommandFailed(f"Python {version} not found (looked on PATH and in ~/.pyenv/versions)")


def build_wheel(session: nox.Session) -> str:
    """The wheel, built from this checkout into a folder of the session's own.

    setuptools builds in the source tree (build/), so two sessions building at once (.ci/run
    prepares compat while tests run) would race and one could pack an empty wheel: a lock
    serialises the builds.
    """
    import fcntl

    dist = os.path.join(WORK, f"dist-{session.name}")
    shutil.rmtree(dist, ignore_errors=True)
    os.makedirs(WORK, exist_ok=True)
    with open(os.path.join(WORK, "build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        session.run_install(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT, external=True)
    (wheel,) = glob.glob(os.path.join(dist, "transfer-*.whl"))
    return wheel


def torch_requirements(torch: str) -> list:
    extra = ["numpy<2"] if tuple(map(int, torch.split(".")[:2])) < (2, 3) else ["numpy"]  # built against NumPy 1
    return [f"torch=={torch}", *extra]


def prepare_venv(session: nox.Session, name: str, torch: str, wheel: str, extra=()) -> str:
    """A venv holding torch==`torch`, the test requirements and the wheel; returns its python."""
    venv = os.path.join(WORK, f"{name}-torch-{torch}")
    python = os.path.join(venv, "bin", "python")
    fresh = os.environ.get("TRANSFER_NOX_FRESH") or not os.path.exists(python)
    if not fresh and installed_torch(python) != torch:
        fresh = True
    if fresh:
        shutil.rmtree(venv, ignore_errors=True)
        session.run_install(find_python(TORCH_PYTHON[torch]), "-m", "venv", venv, external=True)
        session.run_install(python, "-m", "pip", "install", "-q", "--upgrade", "pip", external=True)
        session.run_install(python, "-m", "pip", "install", "-q", *torch_requirements(torch), *TEST_REQUIREMENTS,
                            *extra, external=True)
    before = installed_torch(python)
    session.run_install(python, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", wheel, external=True)
    session.run_install(python, "-m", "pip", "install", "-q", wheel, external=True)  # resolves the dependencies
    after = installed_torch(python)
    if before != after:
        session.error(f"installing transfer changed torch from {before} to {after}")
    probe = ("import os, transfer; assert os.path.exists(os.path.join(os.path.dirname(transfer.__file__), "
             "'bootstrap', 'sitecustomize.py')), 'no bootstrap'")
    found = subprocess.run([python, "-c", probe], cwd=WORK, capture_output=True, text=True)
    if found.returncode != 0:
        session.error(f"the installed wheel does not provide transfer: {found.stderr.strip()[-300:]}")
    session.log(f"torch {after} left in place by `pip install {os.path.basename(wheel)}`")
    return python


def installed_torch(python: str) -> str:
    out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                         capture_output=True, text=True)
    return out.stdout.strip().split("+")[0] if out.returncode == 0 else ""


def test_tree(name: str) -> str:
    """tests/, examples/, benchmarks/ copied outside the checkout, so only the wheel provides transfer."""
    tree = os.path.join(WORK, f"tree-{name}")
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    for entry in TEST_TREE:
        source = os.path.join(ROOT, entry)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(tree, entry), ignore=shutil.ignore_patterns("__pycache__"))
        elif os.path.exists(source):
            shutil.copy(source, tree)
    return tree


def run_pytest(session: nox.Session, python: str, tree: str, wheel: str, *args: str) -> None:
    """pytest in `tree` with the venv's python; its bin first on PATH (transfer-run, torchrun)."""
    env = {"TESTING_INSTALLED_TRANSFER": "1", "WHEEL_UNDER_TEST": wheel,
           "PATH": os.path.dirname(python) + os.pathsep + os.environ["PATH"]}
    with session.chdir(tree):
        session.run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, external=True, env=env)


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """The full suite, default torch, against the installed wheel."""
    wheel = build_wheel(session)
    python = prepare_venv(session, "tests", DEFAULT_TORCH, wheel, extra=framework_requirements())
    run_pytest(session, python, test_tree("tests"), wheel, "tests", *session.posargs)


@nox.session(venv_backend="none")
def compat(session: nox.Session) -> None:
    """The compat suite (pytest -m compat) on the CI pairs, or on the torch versions given after --."""
    versions = list(session.posargs) or list(CI_PAIRS)
    if versions == ["all"]:
        versions = list(TORCH_PYTHON)
    unknown = [v for v in versions if v not in TORCH_PYTHON]
    if unknown:
        session.error(f"unknown torch {unknown}; known: {', '.join(TORCH_PYTHON)} (add a line to TORCH_PYTHON)")
    wheel = build_wheel(session)
    rows, failed = [], []
    for torch in versions:  # every version runs; the session fails at the end if any did
        start = time.monotonic()
        python = prepare_venv(session, "compat", torch, wheel)
        if install_only(session):
            continue
        prepared = time.monotonic() - start
        results = os.path.join(WORK, f"compat-{torch}.xml")
        try:
            run_pytest(session, python, test_tree(f"compat-{torch}"), wheel, "-m", "compat", f"--junitxml={results}",
                       "tests")
        except nox.command.CommandFailed:
            failed.append(torch)
        rows.append(table_row(torch, python, prepared, results))
    if rows:
        table = "\n".join(["| torch | Python | tests passed | failed | skipped | test time | environment |",
                           "|---|---|---|---|---|---|---|", *rows])
        with open(os.path.join(WORK, "compat-table.md"), "w") as fh:
            fh.write(table + "\n")
        session.log("compat results (also in .nox/compat-table.md):\n" + table)
    if failed:
        session.error(f"the compat suite failed on torch {', '.join(failed)}")


def install_only(session: nox.Session) -> bool:
    """True under `nox --install-only`, where session.run skips its command and returns None."""
    return session.run(sys.executable, "-c", "pass", external=True, silent=True) is None


def table_row(torch: str, python: str, prepared: float, results: str) -> str:
    """One markdown row from pytest's junit XML."""
    import xml.etree.ElementTree as ET

    version = subprocess.run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                             capture_output=True, text=True).stdout.strip()
    try:
        suite = ET.parse(results).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        total, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        seconds = float(suite.get("time", 0))
    except (OSError, ET.ParseError, AttributeError):
        return f"| {torch} | {version} | no results | - | - | - | {prepared:.0f} s |"
    passed = total - failures - errors - skipped
    return (f"| {torch} | {version} | {passed} | {failures + errors} | {skipped} | {seconds:.0f} s | "
            f"{prepared:.0f} s |")


def framework_requirements() -> list:
    """The real frameworks of the framework tests, pinned (torch stays as installed)."""
    constraints = os.path.join(ROOT, "tests", "frameworks", "constraints.txt")
    if not os.path.exists(constraints):
        return []
    names = [line.split("==")[0].strip() for line in open(constraints)
             if line.strip() and not line.startswith("#")]
    return ["-c", constraints, *names]


@nox.session(venv_backend="none")
def quickstart(session: nox.Session) -> None:
    """The README's quick start, as a newcomer runs it: `pip install .` into an environment with no
    torch (pip picks one), then the unmodified CUDA example with TRANSFER_DEVICE=cpu."""
    venv = os.path.join(WORK, "quickstart")
    python = os.path.join(venv, "bin", "python")
    shutil.rmtree(venv, ignore_errors=True)
    session.run_install(sys.executable, "-m", "venv", venv, external=True)
    session.run_install(python, "-m", "pip", "install", "-q", ROOT, external=True)
    if install_only(session):
        return
    session.log(f"pip picked torch {installed_torch(python)}")
    workdir = os.path.join(WORK, "quickstart-work")
    shutil.rmtree(workdir, ignore_errors=True)
    with session.chdir(os.path.join(WORK)):  # not the checkout: the installed copy runs
        output = session.run(python, os.path.join(ROOT, "examples", "train_cuda.py"), "--epochs", "1", "--workdir",
                             workdir, external=True, silent=True, env={"TRANSFER_DEVICE": "cpu"})
    print(output)
    if "outputs identical: True" not in output or "epoch 0: loss" not in output:
        session.error("the quick start did not train the example to the end")

"""Test sessions: the wheel users install, on the torch versions they have.

    nox -s fast                  the fast tier (pytest -m "not slow"): the edit loop, about 3 minutes of
                                 pytest on a quiet 2-core machine (+ the first run's environment)
    nox -s tests                 the full suite on the default torch (2.13.0, Python 3.11)
    nox -s nvidia_env            the fast tier inside NVIDIA's container variables (NCCL_VERSION,
                                 CUDA_VISIBLE_DEVICES=0, CUDA_HOME, ...): no test may depend on them
    nox -s compat                the compat suite on the CI pairs (torch 2.0.1/Py 3.8, 2.1.2/3.10, 2.15.0/3.13)
    nox -s compat -- 2.6.0 2.9.1 ... on those torch versions (each with its Python from TORCH_PYTHON); arguments
                                 after the versions go to pytest (`nox -s standins -- 2.15.0 tests/test_x.py -k ddp`)
    nox -s compat -- all         ... on every minor release from 2.0 to 2.15 (about 16 x 5 GB of venvs)
    nox -s standins              every stand-in test (pytest -m standins: device checks, DDP, backend
                                 quirks, clean exit, nanoGPT-style SDPA, the ported public trainers: nanoGPT,
                                 llm.c, the DDP tutorial, imagenet/main.py) on the oldest and newest torch a
                                 stand-in exists for (2.1.2, 2.15.0; torchvision beside 2.15.0), or on the
                                 versions given after --
    nox -s newest                the newest torch on the package index, as `pip install torch` gives a user
                                 today: the fast tier and the stand-in smoke tests (-m smoke) against the wheel,
                                 unless CI's pairs already test that torch (`-- --force` runs it anyway); an
                                 index it cannot reach is reported, not failed
    nox -s engines               the engine tests alone (tests/frameworks/test_engines_*.py, test_multinode.py:
                                 DeepSpeed, FSDP, DTensor, DCP, multi-node) on the default torch, with the frameworks
                                 and NVIDIA's variables as in `tests`; `nox -s results` then writes docs/engines.md
    nox -s quickstart            the README's quick start on a fresh environment with no torch, then
                                 `transfer port` from the installed wheel
    nox -s results               docs/results.md's tables from the junit files of the runs (docs/results/), and
                                 docs/engines.md's engine x target table (docs/engines.py)
    nox -s bench                 `python -m benchmarks --only calls` on torch 2.0.1, 2.1.2, 2.13.0 and 2.15.0
                                 (or the versions given after --), recorded in docs/bench/, and docs/performance.md's
                                 per-call table written from those files (docs/bench.py); timings:
                                 run it on a quiet machine, never beside other sessions
    nox -s upstream -- DIR       flash-attention's, apex's and xformers' own test suites, unmodified, at the
                                 commits docs/upstream.py pins, from the git checkouts DIR/flash-attention,
                                 DIR/apex, DIR/xformers, against the drop-ins on the cpu target; the counts
                                 go to docs/thirdparty-upstream.md (outside CI: it needs those checkouts)
    nox -s wild -- DIR           50+ public CUDA training scripts, unmodified, at the commits wild/manifest.py pins,
                                 from the git clones in DIR (`python wild/run.py --clone-commands DIR`), natively
                                 on the CPU, on the cpu target and on each stand-in, with synthetic data; the table
                                 and rates go to docs/results.md (outside CI: it needs those checkouts; hours)

Every session builds the wheel from this checkout, installs it (with its
dependencies, so the dependency specification is exercised) into a virtual
environment that already holds the torch under test, checks that installing
left that torch exactly as it was, and runs the tests from a copy of tests/ +
examples/ + benchmarks/ outside the checkout: ``import transfer`` can only find
the installed copy (TESTING_INSTALLED_TRANSFER=1 makes the suite assert it).
pip's configuration may cap what it installs (this workplace's caps torch at 2.14.1 for a local
cache; a user's pip has no cap): a pip command that must go past a cap runs without that
configuration (PIP_CONFIG_FILE=/dev/null, for that command only; `pip_env`), and says so.
Virtual environments live in .nox/<tests|compat>-torch-<version> (fast, tests
and nvidia_env share one; compat and standins share one per torch); one is
reused when it already holds that torch (TRANSFER_NOX_FRESH=1 rebuilds).
`nox -s compat standins --install-only` prepares the environments without testing
(.ci/run does that in the background while the full suite runs).
Arguments after `--` of fast / tests / nvidia_env go to pytest (`nox -s fast -- -k ways_in -x`).

Each pytest run writes .nox/junit/<session>-torch-<version>.xml; `nox -s results`
copies them to docs/results/ and writes docs/results.md's tables from them
(docs/results.py; CI checks that the table is what those files say).
"""

from __future__ import annotations

import functools
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

import nox

nox.options.sessions = ["tests", "nvidia_env", "compat", "standins", "quickstart", "newest"]
nox.options.download_python = "never"

ROOT = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(ROOT, ".nox")
JUNIT = os.path.join(WORK, "junit")

#: The distribution name on PyPI (`transfer` there is an unrelated project); the import name is transfer.
DISTRIBUTION = "cuda-transfer"

#: The torch releases we support, each with the Python it is tested on. Together they span
#: Python 3.8-3.13; each pair is one torch ships a wheel for (2.5+ has none for 3.8, 2.15 none for 3.10).
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
    "2.15.0": "3.13",  # wheels for 3.11-3.14 only; past this workplace's pip cap (pip_env lifts it)
}
DEFAULT_TORCH = "2.13.0"
CI_PAIRS = ("2.0.1", "2.1.2", "2.15.0")
#: The torch versions `nox -s bench` measures by default: the compat pairs and the default torch.
BENCH_TORCH = ("2.0.1", "2.1.2", "2.13.0", "2.15.0")
#: The oldest and newest torch a vendor plug-in (so a stand-in) exists for: torch 2.0 has no PrivateUse1 hooks.
STANDIN_PAIRS = ("2.1.2", "2.15.0")
#: torchvision for the stand-in tests that run torchvision scripts (pytorch/examples imagenet/main.py in
#: tests/test_port_upstream.py), pinned to the torch it was built for: its wheels are CUDA builds that load only
#: beside that CUDA build of torch (none loads beside the CPU torch of `tests`). ~23 MB, a few seconds.
STANDIN_TORCHVISION = {"2.14.1": "0.29.1", "2.15.0": "0.29.2"}  # 0.29.2+cu132 is the build for 2.15.0+cu132
TEST_TREE = ("tests", "examples", "benchmarks", "docs", "wild", "README.md", "CHANGELOG.md", "setup.cfg", "noxfile.py", ".ci")
TEST_REQUIREMENTS = ["pytest>=7", "ninja", "setuptools", "hypothesis>=6", "safetensors"]
#: The fast tier: everything not marked slow (markers: tests/conftest.py).
FAST = ("-m", "not slow")
#: What NVIDIA's CUDA container images set (nvidia/cuda, and torch wheels run inside them), with a GPU that
#: this machine lacks: the fast tier must give the same result with them.
NVIDIA_ENV = {
    "NCCL_VERSION": "2.28.3-1",
    "CUDA_VERSION": "13.0.2",
    "CUDA_HOME": "/usr/local/cuda",
    "CUDA_VISIBLE_DEVICES": "0",
    "TORCH_CUDA_ARCH_LIST": "8.0 8.6 9.0+PTX",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "NVIDIA_REQUIRE_CUDA": "cuda>=13.0",
    "NV_CUDA_LIB_VERSION": "13.0.2-1",
    "LIBRARY_PATH": "/usr/local/cuda/lib64/stubs",
}


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
        # setuptools copies the package into build/lib* and never removes what is gone from the source:
        # a module moved or renamed since the last build would ship in the wheel beside its new home
        shutil.rmtree(os.path.join(ROOT, "build"), ignore_errors=True)
        session.run_install(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT, external=True)
    (wheel,) = glob.glob(os.path.join(dist, DISTRIBUTION.replace("-", "_") + "-*.whl"))
    return wheel


def torch_requirements(torch: str) -> list:
    extra = ["numpy<2"] if tuple(map(int, torch.split(".")[:2])) < (2, 3) else ["numpy"]  # built against NumPy 1
    return [f"torch=={torch}", *extra]


@functools.lru_cache(maxsize=None)
def pip_caps() -> tuple:
    """The constraints of the files pip's configuration names (`pip config list`: `constraint = FILE`), as
    packaging Requirements: caps a workplace sets for a local cache (this one: torch<=2.14.1,
    torchvision<=0.29.1). A user's pip has none."""
    from packaging.requirements import InvalidRequirement, Requirement

    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    caps = []
    for files in re.findall(r"^[\w:.-]*\.constraint='([^']*)'$", listed, re.M):
        for path in files.split():
            for line in open(path, encoding="utf-8") if os.path.isfile(path) else ():
                try:
                    caps.append(Requirement(line.split("#")[0].strip()))
                except InvalidRequirement:
                    continue  # blank, a comment, an option line
    return tuple(caps)


def past_caps(*requirements: str) -> list:
    """The `requirements` pip's configured caps (pip_caps) would refuse or hold back: a pinned version outside a
    cap, or an unpinned name that has one (a user's pip takes the newest there). Options and paths are skipped."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    caps = {}
    for cap in pip_caps():
        caps.setdefault(canonicalize_name(cap.name), []).append(cap.specifier)
    blocked = []
    for text in requirements:
        try:
            wanted = Requirement(text)
        except InvalidRequirement:
            continue
        specifiers = caps.get(canonicalize_name(wanted.name), [])
        pins = [s.version for s in wanted.specifier if s.operator in ("==", "===")]
        if specifiers and (not pins or any(not spec.contains(pins[0], prereleases=True) for spec in specifiers)):
            blocked.append(text)
    return blocked


def pip_env(session: nox.Session, *requirements: str) -> dict:
    """The environment of a pip command that installs `requirements` into a venv: {} as a rule, and
    PIP_CONFIG_FILE=/dev/null (pip's configuration, so its caps, left out for that command only) where a cap
    of pip's configuration would refuse or hold one back (past_caps): the command then installs what a user's
    pip installs. Every later pip command into that venv needs it too, or pip's resolver would take the
    uncapped torch back down to the cap."""
    blocked = past_caps(*requirements)
    if not blocked:
        return {}
    session.log(f"pip's configuration caps {', '.join(blocked)} ({', '.join(str(c) for c in pip_caps())}): "
                "its pip commands run without it (PIP_CONFIG_FILE=/dev/null), as a user's pip would")
    return {"PIP_CONFIG_FILE": os.devnull}


def prepare_venv(session: nox.Session, name: str, torch: str, wheel: str, extra=(), python_version: str = "") -> str:
    """A venv holding torch==`torch`, the test requirements, `extra` and the wheel; returns its python.

    The venv's Python is `python_version`, by default TORCH_PYTHON[torch]. An existing venv holding that
    torch is reused; requirements it lacks are installed (a venv made by `nox -s fast` gets the frameworks when
    `nox -s tests` first uses it). Every pip command into it runs with pip_env of its torch and `extra`."""
    venv = os.path.join(WORK, f"{name}-torch-{torch}")
    python = os.path.join(venv, "bin", "python")
    # The venv's torch and the pinned extras decide: an unpinned name among the extras (the frameworks' `torch`, which
    # their constraints file holds) keeps what is installed, and lifting pip's configuration for it would lose this
    # machine's local wheels and indexes (the tests venv's torch 2.13.0+cpu).
    env = pip_env(session, *torch_requirements(torch), *(r for r in extra if "==" in r))
    fresh = os.environ.get("TRANSFER_NOX_FRESH") or not os.path.exists(python)
    if not fresh and installed_torch(python) != torch:
        fresh = True
    if fresh:
        shutil.rmtree(venv, ignore_errors=True)
        os.makedirs(WORK, exist_ok=True)
        free = shutil.disk_usage(WORK).free / 2**30
        session.log(f"{free:.1f} GB free before installing torch {torch} into {venv} (a CUDA build of torch needs "
                    "up to ~8 GB while pip installs it; .ci/run removes each compat environment after use)")
        session.run_install(find_python(python_version or TORCH_PYTHON[torch]), "-m", "venv", venv, external=True)
        session.run_install(python, "-m", "pip", "install", "-q", "--upgrade", "pip", external=True, env=env)
        session.run_install(python, "-m", "pip", "install", "-q", *torch_requirements(torch), external=True, env=env)
    wanted = [*TEST_REQUIREMENTS, *extra]
    stamp = os.path.join(venv, "requirements-installed.txt")
    have = open(stamp).read().split("\n") if os.path.exists(stamp) else []
    if not set(wanted) <= set(have):
        session.run_install(python, "-m", "pip", "install", "-q", *wanted, external=True, env=env)
        if not install_only(session):
            with open(stamp, "w") as fh:
                fh.write("\n".join(sorted(set(have) | set(wanted))))
    before = installed_torch(python)
    if installed_version(python, "transfer"):  # a venv made before the rename holds this wheel as `transfer`
        session.run_install(python, "-m", "pip", "uninstall", "-q", "-y", "transfer", external=True)
    session.run_install(python, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", wheel, external=True,
                        env=env)
    session.run_install(python, "-m", "pip", "install", "-q", wheel, external=True, env=env)  # resolves the dependencies
    after = installed_torch(python)
    if before != after:
        session.error(f"installing {DISTRIBUTION} changed torch from {before} to {after}")
    probe = ("import os, transfer; assert os.path.exists(os.path.join(os.path.dirname(transfer.__file__), "
             "'bootstrap', 'sitecustomize.py')), 'no bootstrap'")
    found = subprocess.run([python, "-c", probe], cwd=WORK, capture_output=True, text=True)
    if found.returncode != 0:
        session.error(f"the installed wheel does not provide transfer: {found.stderr.strip()[-300:]}")
    session.log(f"torch {after} left in place by `pip install {os.path.basename(wheel)}`")
    return python


def installed_version(python: str, distribution: str) -> str:
    out = subprocess.run([python, "-c", f"import importlib.metadata as m; print(m.version({distribution!r}))"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


def installed_torch(python: str) -> str:
    return installed_version(python, "torch").split("+")[0]


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


def junit_path(session: nox.Session, torch: str) -> str:
    os.makedirs(JUNIT, exist_ok=True)
    return os.path.join(JUNIT, f"{session.name}-torch-{torch}.xml")


#: Real packages the tests run with and without, pinned in tests/constraints.txt and installed beside the venvs
#: (pip --target, pure Python), each folder named to the tests in its variable: {distribution: variable}.
BESIDE = {"nvidia-ml-py": "TRANSFER_TEST_NVML"}  # the real pynvml (tests/test_nvml_and_cudart.py)


def beside_folders(session: nox.Session) -> dict:
    """{variable: folder} of BESIDE, each installed once into .nox/beside-<distribution>-<version>."""
    constraints = os.path.join(ROOT, "tests", "constraints.txt")
    pins = dict(line.strip().split("==", 1) for line in open(constraints) if "==" in line and not line.startswith("#"))
    folders = {}
    for name, variable in BESIDE.items():
        folder = os.path.join(WORK, f"beside-{name}-{pins[name]}")
        if not os.path.exists(os.path.join(folder, "installed")):
            shutil.rmtree(folder, ignore_errors=True)
            session.run_install(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", folder,
                                f"{name}=={pins[name]}", external=True)
            open(os.path.join(folder, "installed"), "w").close()
        folders[variable] = folder
    return folders


def run_pytest(session: nox.Session, python: str, tree: str, wheel: str, *args: str, junit: str = "",
               env=None) -> float:
    """pytest in `tree` with the venv's python; its bin first on PATH (transfer-run, torchrun), BESIDE's folders
    named in their variables. Returns the wall time in seconds; with `junit` the results are written there."""
    run_env = {"TESTING_INSTALLED_TRANSFER": "1", "WHEEL_UNDER_TEST": wheel,
               "PATH": os.path.dirname(python) + os.pathsep + os.environ["PATH"], **beside_folders(session),
               **(env or {})}
    options = [f"--junitxml={junit}", "-o", "junit_family=xunit1"] if junit else []
    # a failed assertion's message in full (a child's whole output), not cut to 240 characters: CI's log is
    # the only place a rare failure can be read (`.ci/run` prints each failure's end: docs/results.py --failures)
    options += ["-o", "verbosity_assertions=2"]
    start = time.monotonic()
    with session.chdir(tree):
        session.run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, *args, external=True,
                    env=run_env)
    return time.monotonic() - start


def selection(session: nox.Session, args=None) -> list:
    """What pytest runs: `tests`, or only the test files/ids the command line names (`nox -s tests --
    tests/test_x.py -k y`); other arguments (-k, -x, ...) pass through either way. `args`: those arguments, by
    default session.posargs (compat/standins/bench: what follows the torch versions, split_posargs)."""
    args = list(session.posargs if args is None else args)
    named = any(arg.startswith("tests/") or arg.startswith("tests" + os.sep) for arg in args)
    return args if named else ["tests", *args]


@nox.session(venv_backend="none")
def fast(session: nox.Session) -> None:
    """The fast tier against the installed wheel, default torch: the edit loop (README "Run the tests")."""
    start = time.monotonic()
    wheel = build_wheel(session)
    python = prepare_venv(session, "tests", DEFAULT_TORCH, wheel)
    seconds = run_pytest(session, python, test_tree("fast"), wheel, *FAST, *selection(session),
                         junit=junit_path(session, DEFAULT_TORCH))
    session.log(f"fast tier: pytest {seconds:.0f} s, session {time.monotonic() - start:.0f} s")


#: The triton each torch's CUDA wheel pins (its Requires-Dist; 2.13.0: 9.9 s to install, 691 MB). `tests` installs
#: it beside the venv, not into it, and names the folder in TRANSFER_TEST_TRITON: tests/test_compile_with_triton.py
#: runs torch.compile with it importable; the rest of the suite keeps the CPU build without triton.
TRITON_FOR_TORCH = {"2.13.0": "3.7.1"}


def triton_folder(session: nox.Session, python: str, torch: str) -> str:
    folder = os.path.join(WORK, f"triton-{TRITON_FOR_TORCH[torch]}")
    if not os.path.exists(os.path.join(folder, "triton", "__init__.py")):
        session.run_install(python, "-m", "pip", "install", "-q", "--no-deps", "--target", folder,
                            f"triton=={TRITON_FOR_TORCH[torch]}", external=True)
    return folder


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """The full suite, default torch, against the installed wheel, with NVIDIA's container variables set
    (NVIDIA_ENV): the suite is hermetic, so it passes the same with them as without."""
    wheel = build_wheel(session)
    python = prepare_venv(session, "tests", DEFAULT_TORCH, wheel, extra=framework_requirements())
    session.log("with " + " ".join(f"{k}={v}" for k, v in NVIDIA_ENV.items()))
    env = {**NVIDIA_ENV, "TRANSFER_TEST_TRITON": triton_folder(session, python, DEFAULT_TORCH)}
    run_pytest(session, python, test_tree("tests"), wheel, "--durations=40", *selection(session),
               junit=junit_path(session, DEFAULT_TORCH), env=env)


#: The engine tests, which docs/engines.md reports target by target.
ENGINE_TESTS = ("tests/frameworks/test_engines_*.py", "tests/frameworks/test_multinode.py")


@nox.session(venv_backend="none")
def engines(session: nox.Session) -> None:
    """The engine tests alone, as the full suite runs them (frameworks installed, NVIDIA's variables set), for
    docs/engines.md (`nox -s results` after it); the full suite runs them too."""
    wheel = build_wheel(session)
    python = prepare_venv(session, "tests", DEFAULT_TORCH, wheel, extra=framework_requirements())
    tree = test_tree("engines")
    files = sorted(os.path.relpath(f, tree) for pattern in ENGINE_TESTS for f in glob.glob(os.path.join(tree, pattern)))
    run_pytest(session, python, tree, wheel, "--durations=20", *files, *session.posargs,
               junit=junit_path(session, DEFAULT_TORCH), env=NVIDIA_ENV)


@nox.session(venv_backend="none")
def nvidia_env(session: nox.Session) -> None:
    """The fast tier with NVIDIA's container variables set (NVIDIA_ENV): an environment assumption fails here."""
    wheel = build_wheel(session)
    python = prepare_venv(session, "tests", DEFAULT_TORCH, wheel)
    session.log("with " + " ".join(f"{k}={v}" for k, v in NVIDIA_ENV.items()))
    run_pytest(session, python, test_tree("nvidia"), wheel, *FAST, *selection(session),
               junit=junit_path(session, DEFAULT_TORCH), env=NVIDIA_ENV)


def split_posargs(session: nox.Session) -> tuple:
    """(torch versions, pytest arguments) of the arguments after --: the leading ones that are versions (or
    `all`), then the rest for pytest (`nox -s standins -- 2.15.0 -k ddp`)."""
    args = list(session.posargs)
    n = 0
    while n < len(args) and re.fullmatch(r"\d+\.\d+\.\d+|all", args[n]):
        n += 1
    return args[:n], args[n:]


def torch_versions(session: nox.Session, default) -> list:
    versions = split_posargs(session)[0] or list(default)
    if versions == ["all"]:
        versions = list(TORCH_PYTHON)
    unknown = [v for v in versions if v not in TORCH_PYTHON]
    if unknown:
        session.error(f"unknown torch {unknown}; known: {', '.join(TORCH_PYTHON)} (add a line to TORCH_PYTHON)")
    return versions


def per_torch(session: nox.Session, default, *pytest_args: str, extra=lambda torch: ()) -> None:
    """pytest `pytest_args` against the wheel on each torch (shared venvs .nox/compat-torch-<v>, with the
    requirements `extra(torch)` too); every version runs, the session fails at the end if any did."""
    versions = torch_versions(session, default)
    chosen = split_posargs(session)[1]
    wheel = build_wheel(session)
    failed = []
    for torch in versions:
        python = prepare_venv(session, "compat", torch, wheel, extra=extra(torch))
        if install_only(session):
            continue
        try:
            run_pytest(session, python, test_tree(f"{session.name}-{torch}"), wheel, *pytest_args,
                       *selection(session, chosen), junit="" if chosen else junit_path(session, torch))  # a selection is no row
        except nox.command.CommandFailed:
            failed.append(torch)
    if not install_only(session):
        session.log("results (python docs/results.py .nox/junit):\n" + subprocess.run(
            [sys.executable, os.path.join(ROOT, "docs", "results.py"), JUNIT], capture_output=True,
            text=True).stdout)
    if failed:
        session.error(f"{session.name} failed on torch {', '.join(failed)}")


@nox.session(venv_backend="none")
def compat(session: nox.Session) -> None:
    """The compat suite (pytest -m compat) on the CI pairs, or on the torch versions given after --."""
    per_torch(session, CI_PAIRS, "-m", "compat")


@nox.session(venv_backend="none")
def standins(session: nox.Session) -> None:
    """Every stand-in test (pytest -m standins) on the oldest and newest torch a stand-in exists for, or on
    the torch versions given after --. Shares the compat environments."""
    per_torch(session, STANDIN_PAIRS, "-m", "standins",
              extra=lambda torch: [f"torchvision=={STANDIN_TORCHVISION[torch]}"] if torch in STANDIN_TORCHVISION else [])


#: `nox -s newest`: the fast tier and the stand-in smoke tests (device checks, 2-rank DDP + SyncBatchNorm over each
#: vendor's backend, the nanoGPT-style SDPA script: `smoke` in tests/conftest.py), with `-m`.
NEWEST_TESTS = ("-m", "not slow or smoke")
#: Where `nox -s newest` leaves its one-line outcome (.ci/run prints it at the end).
NEWEST_OUTCOME = os.path.join(WORK, "newest.txt")


def newest_on_index(session: nox.Session, python_version: str):
    """(version, None) of the torch `pip install torch` gives a user on Python `python_version` today (a dry run
    with pip's configuration, so its caps, left out: pip_env), or (None, why) where the index gave no answer."""
    try:
        done = subprocess.run([find_python(python_version), "-m", "pip", "install", "--dry-run", "--no-deps",
                               "--ignore-installed", "--quiet", "--report", "-", "torch"],
                              capture_output=True, text=True, timeout=600, env={**os.environ, **pip_env(session, "torch")})
    except subprocess.TimeoutExpired:
        return None, "pip's dry run did not finish in 10 minutes"
    try:
        (found,) = [item["metadata"]["version"] for item in json.loads(done.stdout)["install"]
                    if item["metadata"]["name"].lower() == "torch"]
    except (ValueError, KeyError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"pip's dry run exited {done.returncode}: {last[-300:]}"
    return found.split("+")[0], None


@nox.session(venv_backend="none")
def newest(session: nox.Session) -> None:
    """The newest torch on the package index, as `pip install torch` gives a user today (pip's caps lifted), with
    the Python of the newest pair of TORCH_PYTHON: the fast tier and the stand-in smoke tests against the wheel
    (NEWEST_TESTS), so CI meets a torch release the week it ships, before anyone adds it to TORCH_PYTHON.

    - A torch that CI's compat and standins sessions already test (in CI_PAIRS and STANDIN_PAIRS) is not run
      twice: the session says so and passes (`nox -s newest -- --force` runs it anyway).
    - Only a failing test fails the session, and its message names the torch release. An index that cannot be
      reached, or a pip install that fails (a network fault, not transfer's), is reported and the session
      passes: no network fault turns CI red.
    - The outcome, one line, goes to the log and to .nox/newest.txt (.ci/run prints it last).
    """
    force = "--force" in session.posargs
    python_version = TORCH_PYTHON[max(TORCH_PYTHON, key=lambda v: tuple(map(int, v.split("."))))]

    def outcome(line: str) -> None:
        os.makedirs(WORK, exist_ok=True)
        with open(NEWEST_OUTCOME, "w") as fh:
            fh.write(f"nox -s newest: {line}\n")
        session.log(line)

    found, why = newest_on_index(session, python_version)
    if found is None:
        outcome(f"NOT RUN: the package index gave no newest torch for Python {python_version} ({why}); "
                "nothing was tested, nothing failed")
        return
    if found in CI_PAIRS and found in STANDIN_PAIRS and not force:
        outcome(f"torch {found} is the newest on the index for Python {python_version}, and CI's compat and "
                f"standins sessions test it (CI_PAIRS, STANDIN_PAIRS): not run twice")
        return
    wheel = build_wheel(session)
    try:
        python = prepare_venv(session, "newest", found, wheel, python_version=python_version)
    except nox.command.CommandFailed as failed:
        outcome(f"NOT RUN: torch {found}, the newest on the index, could not be installed ({failed.reason}: pip's "
                "output above; a network or index fault, not transfer's); nothing was tested, nothing failed")
        return
    if install_only(session):
        return
    try:
        run_pytest(session, python, test_tree("newest"), wheel, *NEWEST_TESTS, "tests",
                   junit=junit_path(session, found))
    except nox.command.CommandFailed:
        tested = "a tested pair" if found in TORCH_PYTHON else "not yet in noxfile.py's TORCH_PYTHON"
        outcome(f"FAILED on torch {found}, the newest torch on the package index ({tested}): the fast tier or the "
                f"stand-in smoke tests fail on it (log above); users who `pip install torch` today get it")
        session.error(f"transfer fails on torch {found}, the newest torch release on the package index")
    outcome(f"passed on torch {found}, the newest torch on the package index (Python {python_version}): fast tier "
            "and stand-in smoke tests")


def install_only(session: nox.Session) -> bool:
    """True under `nox --install-only`, where session.run skips its command and returns None."""
    return session.run(sys.executable, "-c", "pass", external=True, silent=True) is None


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
    """The README's quick start, as a newcomer runs it: `pip install cuda-transfer` (the wheel built from
    this checkout, found by its name) into an environment with no torch (pip picks one, past any cap of pip's
    configuration: the newest, as a user's pip does), the unmodified CUDA
    example with TRANSFER_DEVICE=cpu, then `transfer port` of the examples."""
    wheel = build_wheel(session)
    venv = os.path.join(WORK, "quickstart")
    python = os.path.join(venv, "bin", "python")
    shutil.rmtree(venv, ignore_errors=True)
    session.run_install(sys.executable, "-m", "venv", venv, external=True)
    session.run_install(python, "-m", "pip", "install", "-q", "--find-links", os.path.dirname(wheel), DISTRIBUTION,
                        external=True, env=pip_env(session, "torch"))  # the torch a user's pip picks: uncapped
    if install_only(session):
        return
    version = os.path.basename(wheel).split("-")[1]
    ours = subprocess.run([python, "-c", f"import importlib.metadata as m, transfer; print(m.version({DISTRIBUTION!r}),"
                           " transfer.__version__)"], cwd=WORK, capture_output=True, text=True).stdout.split()
    if ours != [version, version]:
        session.error(f"`pip install {DISTRIBUTION}` did not install this checkout's {version}: {ours}")
    session.log(f"pip picked torch {installed_torch(python)}")
    workdir = os.path.join(WORK, "quickstart-work")
    shutil.rmtree(workdir, ignore_errors=True)
    with session.chdir(os.path.join(WORK)):  # not the checkout: the installed copy runs
        output = session.run(python, os.path.join(ROOT, "examples", "train_cuda.py"), "--epochs", "1", "--workdir",
                             workdir, external=True, silent=True, env={"TRANSFER_DEVICE": "cpu"})
        print(output)
        if "outputs identical: True" not in output or "epoch 0: loss" not in output:
            session.error("the quick start did not train the example to the end")
        ported = os.path.join(workdir, "ported")
        session.run(os.path.join(venv, "bin", "transfer"), "port", os.path.join(ROOT, "examples"), "--device", "npu",
                    "--out", ported, external=True)
        if not os.path.exists(os.path.join(ported, "train_cuda.py")):
            session.error("transfer port wrote no ported example")


@nox.session(venv_backend="none")
def results(session: nox.Session) -> None:
    """Record the junit files of the runs (.nox/junit) in docs/results/ (without this machine's paths) and
    write docs/results.md's tables from docs/results/ (docs/results.py) and docs/engines.md's table
    (docs/engines.py). Run it after the sessions whose rows you want to refresh."""
    runs = [path for path in sorted(glob.glob(os.path.join(JUNIT, "*.xml")))
            if not os.path.basename(path).startswith(("fast-", "nvidia_env-"))]  # the fast tier is no row
    tool = os.path.join(ROOT, "docs", "results.py")
    if runs:  # copied without the paths of this machine (docs/results.py record())
        session.run(sys.executable, tool, "--record", *runs, external=True)
    session.run(sys.executable, tool, "--write", external=True)
    session.run(sys.executable, os.path.join(ROOT, "docs", "engines.py"), "--write", external=True)


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """The per-call benchmarks (`python -m benchmarks --only calls`) against the wheel on each torch (the
    compat environments .nox/compat-torch-<v>, as `per_torch` uses), one after the other; each run's
    results.json is recorded as docs/bench/calls-torch-<v>.json and docs/performance.md's per-call table is written
    from docs/bench/ (docs/bench.py). Arguments after -- are torch versions (default BENCH_TORCH)."""
    versions = torch_versions(session, BENCH_TORCH)
    wheel = build_wheel(session)
    tool = os.path.join(ROOT, "docs", "bench.py")
    for torch in versions:
        python = prepare_venv(session, "compat", torch, wheel)
        if install_only(session):
            continue
        tree, out = test_tree(f"bench-{torch}"), os.path.join(WORK, f"bench-{torch}")
        with session.chdir(tree):
            session.run(python, "-m", "benchmarks", "--only", "calls", "--out", out, external=True,
                        env={"TESTING_INSTALLED_TRANSFER": "1",
                             "PATH": os.path.dirname(python) + os.pathsep + os.environ["PATH"]})
        session.run(sys.executable, tool, "--record", os.path.join(out, "results.json"), external=True)
    if not install_only(session):
        session.run(sys.executable, tool, "--write", external=True)
        session.run(sys.executable, tool, external=True)


@nox.session(venv_backend="none")
def upstream(session: nox.Session) -> None:
    """The upstream packages' own tests against the wheel's drop-ins (docs/upstream.py), then the counts
    table of docs/thirdparty-upstream.md. The argument after -- is the folder holding the checkouts."""
    if len(session.posargs) != 1 or not os.path.isdir(session.posargs[0]):
        session.error("usage: nox -s upstream -- DIR (DIR/flash-attention, DIR/apex, DIR/xformers: git clones)")
    tool = os.path.join(ROOT, "docs", "upstream.py")
    sys.path.insert(0, os.path.dirname(tool))
    import upstream as suites

    wheel = build_wheel(session)
    python = prepare_venv(session, "upstream", DEFAULT_TORCH, wheel, extra=suites.REQUIREMENTS)
    session.run(sys.executable, tool, "--run", os.path.abspath(session.posargs[0]), python, external=True)
    session.run(sys.executable, tool, "--write", external=True)


#: The wild scripts' environment: torch 2.14.1 with torchvision 0.29.1 (its wheels load only beside that CUDA build
#: of torch) on Python 3.11, and the packages of wild/constraints.txt.
WILD_TORCH, WILD_PYTHON = "2.14.1", "3.11"


@nox.session(venv_backend="none")
def wild(session: nox.Session) -> None:
    """The wild scripts (wild/run.py, wild/manifest.py) against the wheel, then docs/results.md's wild section.
    The argument after -- is the folder holding the clones; WILD_ONLY=name,... and WILD_TARGETS=native,cpu,...
    narrow the run (a later run replaces those outcomes in .nox/wild/results.json)."""
    if len(session.posargs) != 1 or not os.path.isdir(session.posargs[0]):
        session.error("usage: nox -s wild -- DIR (the clones: python wild/run.py --clone-commands DIR)")
    constraints = os.path.join(ROOT, "wild", "constraints.txt")
    names = [line.split("==")[0].strip() for line in open(constraints) if "==" in line and not line.startswith("#")]
    wheel = build_wheel(session)
    python = prepare_venv(session, "wild", WILD_TORCH, wheel, extra=["-c", constraints, *names],
                          python_version=WILD_PYTHON)
    tool = os.path.join(ROOT, "wild", "run.py")
    session.run(sys.executable, tool, "--run", os.path.abspath(session.posargs[0]), python,
                "--only", os.environ.get("WILD_ONLY", ""), "--targets",
                os.environ.get("WILD_TARGETS", "native,cpu,npu,sdaa,gcu"), external=True)
    session.run(sys.executable, tool, "--write", external=True)

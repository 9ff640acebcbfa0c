"""Shared fixtures: an installed target per test, and subprocess runners."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# nox sessions run this suite from a copy of tests/ outside the checkout against the installed wheel.
INSTALLED = os.environ.get("TESTING_INSTALLED_TRANSFER") == "1"
VENDORS = os.path.join(ROOT, "tests", "vendors")


def vendor_path(vendor):
    """The PYTHONPATH entry of a machine with one accelerator: tests/vendors/only/<vendor> holds links to
    torch_<vendor> (for xpu, in torch itself: sim_xpu and the dist-info that makes torch load it at `import
    torch`) and the shared stand-in code, nothing else. A real machine has one vendor's plug-in, and
    frameworks import every one they find (accelerate imports torch_sdaa whenever it can, DeepSpeed probes
    torch_npu then torch_sdaa): with all of tests/vendors on the path they meet a second vendor, which the
    stand-ins refuse in one process, as the real ones can never meet."""
    return os.path.join(VENDORS, "only", vendor)


EXAMPLES = os.path.join(ROOT, "examples")
SCRIPTS = os.path.join(ROOT, "tests", "scripts")

#: A vendor stand-in needs torch's PrivateUse1 mechanism, as a real plug-in does (torch_npu starts at 2.1).
STANDINS = hasattr(torch.utils, "generate_methods_for_privateuse1_backend")  # torch 2.0 has none
NO_STANDINS = (f"torch {torch.__version__} has no PrivateUse1 mechanism (hooks interface, "
               "generate_methods_for_privateuse1_backend), so no vendor plug-in or stand-in exists for it")
#: The xpu stand-in (tests/vendors/sim_xpu, torch's own device simulated) needs torch >= 2.8 (xccl in torch) and a
#: (major, minor) of the torch under test
TORCH_RELEASE = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
#: torch built without XPU and without CUDA (in torch 2.15's CUDA build, DDP's backward on the simulated xpu device
#: reaches the CUDA runtime: "CUDA driver version is insufficient"; users of xpu have torch's XPU build).
XPU_STANDIN = (TORCH_RELEASE >= (2, 8)
               and not getattr(torch._C, "_has_xpu", False) and torch.version.cuda is None)
NO_XPU_STANDIN = (f"torch {torch.__version__}: the xpu stand-in needs torch >= 2.8 (xccl is in torch from 2.8) built "
                  "without CUDA")


def dynamo_traces_wrapper_checks() -> bool:
    """True if dynamo traces what the translation wrappers do (`type(a) in frozenset`, `dict.get`)."""
    import torch._dynamo

    types, cache = frozenset({str}), {}

    def probe(t):
        return t + 1 if type("cuda") in types and cache.get("cuda", None) is None else t

    torch._dynamo.reset()
    try:
        torch.compile(probe, fullgraph=True, backend="eager")(torch.zeros(1))
    except Exception:
        return False
    finally:
        torch._dynamo.reset()
    return True


def needs_standins(test):
    """For a test that runs a vendor stand-in: skipped with NO_STANDINS where none can exist (torch 2.0), and
    slow (the stand-ins' C++ extension is built first: a minute or more on a fresh machine)."""
    return pytest.mark.slow(pytest.mark.skipif(not STANDINS, reason=NO_STANDINS)(test))


@pytest.fixture
def cpu_target(monkeypatch):
    """transfer installed for the cpu target for one test, uninstalled after."""
    import transfer

    transfer.uninstall()
    for name in ("TRANSFER_DISABLE", "TRANSFER_STRICT", "TRANSFER_CPU_DEVICES", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRANSFER_QUIET", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # see CPU_TARGET_ENV
    transfer.install("cpu")
    yield transfer
    transfer.uninstall()


@pytest.fixture
def install_cpu(monkeypatch):
    """install_cpu(NAME=value, ...): transfer installed for the cpu target with those
    environment variables set (None: unset); returns status(). Uninstalled after the test."""
    import transfer

    def install(**env):
        transfer.uninstall()
        monkeypatch.setenv("TRANSFER_QUIET", "1")
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # see CPU_TARGET_ENV
        for name, value in env.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, str(value))
        return transfer.install("cpu")

    yield install
    if transfer.status().get("device") == "cpu":
        torch.cuda.set_device(0)  # the next test starts on device 0, as a new process does (a test may leave 1)
    transfer.uninstall()


def load_example(name):
    """examples/<name>.py as a module under a private name (tests/scripts has a `ddp_syncbn` too)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_full_batch = {}


def full_batch_reference():
    """examples/ddp_syncbn.py's model trained in one process on the full batch (plain BatchNorm,
    CPU, no transfer): what a DDP + SyncBatchNorm run must end with. Computed once."""
    if not _full_batch:
        import torch

        example = load_example("ddp_syncbn")
        model = example.build_model()
        optimizer = example.make_optimizer(model)
        criterion = torch.nn.CrossEntropyLoss()
        data = example.build_dataset()
        for step in range(example.STEPS):
            x, y = data[step * example.GLOBAL_BATCH:(step + 1) * example.GLOBAL_BATCH]
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        _full_batch.update(model.state_dict())
    return _full_batch


#: What stock torch >= 2.13 prints when a gloo worker frees a finished collective's tensors after the script
#: ended: the rank aborts at exit (gdb: ProcessGroupGloo::runLoop -> ~AsyncWork -> decref_pyobject -> take_gil
#: in a finalizing interpreter; 5 in 24 runs of a 2-rank all_reduce script under load; transfer's exit drain
#: prevents it: transfer/patches/shutdown.py).
STOCK_EXIT_ABORT = "terminate called without an active exception"


def stock_exit_abort(returncode, log) -> bool:
    """Whether a reference run of stock torch (no transfer: the oracle a test compares with) failed only by
    torch's own abort at exit. The caller still requires every rank's finished results: the oracle was
    computed; a run under transfer is never excused."""
    if returncode != 0 and STOCK_EXIT_ABORT in log:
        print(f"reference run: stock torch aborted at exit (rc {returncode}: {STOCK_EXIT_ABORT!r}); "
              "its results are checked")
        return True
    return False


_GIVEN_PORTS = set()
_GIVEN_LOCK = threading.Lock()


def free_port():
    """A free TCP port, never one this process handed out before: the OS gives a port back as soon as
    the probe closes, so two jobs started together (a thread pool) could otherwise share one."""
    with _GIVEN_LOCK:
        while True:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _GIVEN_PORTS:
                _GIVEN_PORTS.add(port)
                return port


def torchrun_standalone(nproc=2):
    """Arguments after the interpreter for a one-node ``torchrun --standalone`` job whose rendezvous is its own.

    ``--standalone`` is what users write. torch >= 2.1 gives its store a free port (``localhost:0``); torch 2.0
    binds ``localhost:29400``, so two such jobs at once (the e2e matrix runs two cells at a time, CI runs the
    compat suite beside the full suite) share one store: the second agent joins the first's as a client and
    fails or hangs when that job ends (CI: ``ddp-cpu-env: no exit after 420s`` on torch 2.0.1, every rank
    done). There the job gets a c10d rendezvous on a private port instead, which is what ``--standalone``
    means on later torch."""
    if torch.__version__ >= (2, 1):  # torch's TorchVersion compares with tuples
        rendezvous = ["--standalone"]
    else:
        import uuid

        rendezvous = ["--nnodes=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{free_port()}",
                      f"--rdzv-id={uuid.uuid4()}"]
    return ["-m", "torch.distributed.run", *rendezvous, f"--nproc_per_node={nproc}"]


#: What a machine's environment may hold that changes what transfer, torch, a launcher or a stand-in does:
#: NVIDIA's container images (NCCL_VERSION, CUDA_VERSION, CUDA_HOME, TORCH_CUDA_ARCH_LIST,
#: NVIDIA_VISIBLE_DEVICES, ...), a job launcher (RANK, MASTER_PORT, TORCHELASTIC_*), a vendor's runtime
#: (ASCEND_RT_VISIBLE_DEVICES, HCCL_*), a user's own TRANSFER_* switches. No test may depend on them:
#: `clean_env()` leaves them out of every child's environment and the `hermetic_environment` fixture takes
#: them out of this process, so a test sets each condition it tests (CI runs the fast tier with NVIDIA's
#: variables set to prove it: `nox -s nvidia_env`).
AMBIENT_PREFIXES = ("TRANSFER_", "_TRANSFER", "SIM_ACCEL", "NCCL_", "TORCH_", "PYTORCH_", "CUDA_", "CUDNN_", "NVIDIA_",
                    "NV_", "HCCL_", "TCCL_", "ECCL_", "GLOO_", "ASCEND_", "SDAA_", "TOPS_", "TORCHELASTIC_",
                    "MASTER_", "LOCAL_")
AMBIENT_NAMES = ("RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE",
                 "NODE_RANK", "OMP_NUM_THREADS", "DS_ACCELERATOR")
#: The suite's own settings, kept in this process (children get what a test passes on).
SUITE_SETTINGS = ("TRANSFER_HYPOTHESIS_PROFILE",)

#: Hides every real GPU from a child (the CUDA runtime reads it when it initialises): what a test that means
#: "a machine without a GPU" passes, e.g. `clean_env(**NO_GPU)`; `auto` is `cpu` there. Not with a vendor
#: target alone: transfer copies CUDA_VISIBLE_DEVICES to the vendor's variable when that is unset, and an
#: empty list hides the vendor's devices too; set the vendor's variable with it.
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}
#: The stand-ins' (and the real runtimes') visible-devices variables.
VISIBLE_DEVICES = {"npu": "ASCEND_RT_VISIBLE_DEVICES", "sdaa": "SDAA_VISIBLE_DEVICES", "gcu": "TOPS_VISIBLE_DEVICES",
                   "mlu": "MLU_VISIBLE_DEVICES", "musa": "MUSA_VISIBLE_DEVICES", "supa": "SUPA_VISIBLE_DEVICES",
                   "xpu": "ZE_AFFINITY_MASK"}


def no_gpu(target="cpu"):
    """NO_GPU for a child that runs transfer's `target`: on a vendor target the vendor's own variable lists
    every device (a stand-in's list stops at the first id it lacks), so transfer leaves it as it is."""
    env = dict(NO_GPU)
    if target in VISIBLE_DEVICES:
        env[VISIBLE_DEVICES[target]] = ",".join(str(i) for i in range(16))
    return env


def target_env(target, **extra):
    """clean_env for a child running a CUDA script under transfer's `target` (TRANSFER_DEVICE, quiet), on a
    vendor as on a machine with that one accelerator and no GPU (`vendor_path`, `no_gpu`); a checkout's
    PYTHONPATH stays behind the stand-in's."""
    if target == "cpu":
        return clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1, **extra)
    path = os.pathsep.join([vendor_path(target), *filter(None, [os.environ.get("PYTHONPATH")])])
    return clean_env(TRANSFER_DEVICE=target, TRANSFER_QUIET=1, PYTHONPATH=path, **{**no_gpu(target), **extra})


def is_ambient(name):
    return name.startswith(AMBIENT_PREFIXES) or name in AMBIENT_NAMES


def clean_env(**extra):
    """The environment for a child process: this process's, less everything a machine may set that
    changes what the child does (AMBIENT_PREFIXES, AMBIENT_NAMES), plus `extra` (None: left unset)."""
    env = {k: v for k, v in os.environ.items() if not is_ambient(k)}
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items() if v is not None})
    return env


# This process is a machine without a GPU: in-process tests compare with torch's native answers there
# (torch.cuda.is_available() False). Set before anything initialises CUDA; children get clean_env().
os.environ["CUDA_VISIBLE_DEVICES"] = ""
# hypothesis: the same examples on every run ("ci", the default), so a CI result is the code's, not the
# draw's; `pytest --hypothesis-profile=explore` draws new examples (and keeps failures in .hypothesis/).
try:
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("ci", derandomize=True)
    _hypothesis_settings.register_profile("explore", derandomize=False)
    _hypothesis_settings.load_profile("ci")
except ImportError:  # the compat suite's tests need no hypothesis
    pass

#: CPU_TARGET_ENV: the cpu target names a CUDA_VISIBLE_DEVICES it finds as ignored (a warning; an error under
#: TRANSFER_STRICT), as it has no GPUs to select. A user's cpu-target job on a laptop has none set, so the
#: cpu_target / install_cpu fixtures remove it for their test (restored after it; CUDA is not initialised then).


@pytest.fixture(scope="session", autouse=True)
def hermetic_environment():
    """This process without the machine's variables (see AMBIENT_PREFIXES) for the whole session: an
    in-process install reads NCCL_* / RANK / visible-devices variables as a child would."""
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if is_ambient(name) and name not in SUITE_SETTINGS and name != "CUDA_VISIBLE_DEVICES":
                patch.delenv(name)
        yield


def run(args, env=None, timeout=240, cwd=None, check=True):
    """Run a command, bounded by `timeout`; on failure (or hang) show its log.

    The command runs in its own session: on a timeout the whole process group
    (torchrun's or mp.spawn's workers included) is killed, not only the leader.
    """
    proc = subprocess.Popen(args, env=env if env is not None else clean_env(), cwd=cwd or ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    out, err = communicate_bounded(proc, timeout, args)
    result = subprocess.CompletedProcess(args, proc.returncode, out, err)
    if check and result.returncode != 0:
        pytest.fail(f"{args} exited {result.returncode}\n--- stdout\n{out}\n--- stderr\n{err}")
    return result


def communicate_bounded(proc, timeout, what):
    """proc.communicate(), bounded: on a hang the whole process group is killed and the test fails
    showing what the command printed (`proc` started with start_new_session=True)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"{what} hung for {timeout}s\n--- stdout\n{out}\n--- stderr\n{err}")


def kill_group(proc, sig=signal.SIGKILL):
    """Send `sig` to the process group led by `proc` (started with start_new_session=True)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_hung(proc, procs=()):
    """The output of `proc` after it hung, every process group in `procs` (default: `proc`'s) stopped:
    SIGABRT first, so children with PYTHONFAULTHANDLER set print every thread's stack (a hang in CI names
    where each process was), then SIGKILL for what is left after 15 s."""
    procs = procs or (proc,)
    for p in procs:
        kill_group(p, signal.SIGABRT)
    try:
        return proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        for p in procs:
            kill_group(p)
        return proc.communicate()


def console_script(name):
    """Path of the console script `name` installed with the interpreter running the tests
    (a venv's bin/ need not be on PATH; a `shutil.which` there may find another install)."""
    import sysconfig

    path = os.path.join(sysconfig.get_path("scripts"), name)
    if not os.path.exists(path):
        path = shutil.which(name)
    assert path, f"{name} is not installed for {sys.executable} (pip install -e .)"
    return path


def python(*args, **kwargs):
    return run([sys.executable, *args], **kwargs)


def script_beside_a_library(tmp_path, script, library, vendor="npu"):
    """stdout of the user's script `script` (train.py) under TRANSFER_DEVICE=`vendor` (its stand-in, 2 devices),
    beside `devlib`, a library installed under site-packages whose source is `library`: transfer answers the
    script as CUDA and the library as the plug-in (frames.is_script)."""
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "devlib.py").write_text(library)
    (tmp_path / "train.py").write_text(script)
    path = [VENDORS, str(site)] + ([] if INSTALLED else [ROOT])
    env = clean_env(TRANSFER_DEVICE=vendor, PYTHONPATH=os.pathsep.join(path), TRANSFER_QUIET=1,
                    SIM_ACCEL_DEVICE_COUNT=2)
    return python(str(tmp_path / "train.py"), env=env, timeout=600).stdout


def pytest_configure(config):
    # Tiers are selections: `-m "not slow"` is the fast tier (nox -s fast), everything is the full suite.
    config.addinivalue_line("markers", "compat: the compat suite, run on every torch of the matrix (nox -s compat)")
    config.addinivalue_line("markers", "slow: not in the fast tier (nox -s fast runs -m 'not slow'): subprocess-heavy "
                                       "tests (torchrun, e2e cells beyond one per way in, stand-ins, frameworks)")
    config.addinivalue_line("markers", "standins: the vendor stand-ins' own tests, and scripts on them that must hold on "
                                       "every torch (nox -s standins runs them on the oldest and newest torch a "
                                       "stand-in exists for)")
    config.addinivalue_line("markers", "smoke: the stand-in smoke tests (the extension builds, each stand-in's device "
                                       "checks, 2-rank DDP over its backend, nanoGPT-style SDPA) that nox -s newest "
                                       "runs beside the fast tier on the newest torch on the index")


@pytest.fixture(scope="session", autouse=True)
def run_properties(record_testsuite_property):
    """What ran, in the junit file (docs/results.py makes docs/results.md's table of them)."""
    import platform

    import transfer

    record_testsuite_property("torch", torch.__version__)
    record_testsuite_property("python", platform.python_version())
    record_testsuite_property("transfer", transfer.__version__)


def pytest_report_header(config):
    import transfer

    return f"transfer under test: {os.path.dirname(transfer.__file__)} ({'installed wheel' if INSTALLED else 'checkout'})"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Summaries that test modules leave on the config (the e2e matrix's timings)."""
    lines = getattr(config, "_e2e_summary", None)
    if lines:
        terminalreporter.section("e2e matrix timings")
        for line in lines:
            terminalreporter.write_line(line)

"""torch.compile in a CUDA script on every target: the target's own compiler where the plug-in
registers one, else a backend that runs there, said once per call site; the same losses as eager.

The vendor cases run the stand-ins (tests/vendors): torch_npu's registers the ``npu`` / ``npugraphs``
dynamo backends as torch_npu 2.13 does (no inductor code generation: a torch_npu without Triton-Ascend);
torch_sdaa's and torch_gcu's register none, as far as is known of the real ones (tests/vendors/README.md).
"""

import glob
import json
import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from conftest import INSTALLED, NO_STANDINS, SCRIPTS, STANDINS, VENDORS, clean_env, console_script, python, run

NANOGPT = os.path.join(SCRIPTS, "thirdparty", "nanogpt_compile.py")
#: The line of nanogpt_compile.py that calls torch.compile (the notice and the call-site log name it).
COMPILE_LINE = next(i for i, line in enumerate(open(NANOGPT), 1) if "model = torch.compile(model" in line)
VARIANTS = {"eager": ["--compile=False"], "default": [], "reduce-overhead": ["--mode=reduce-overhead"],
            "fullgraph": ["--fullgraph=True"]}
#: What each vendor stand-in's torch.compile becomes (its plug-in's registrations): backend per variant.
BECOMES = {
    "npu": {"default": "torch_npu's 'npu' backend", "reduce-overhead": "torch_npu's 'npugraphs' backend",
            "fullgraph": "torch_npu's 'npu' backend"},
    "sdaa": dict.fromkeys(("default", "reduce-overhead", "fullgraph"), "dynamo's 'eager' backend"),
    "gcu": dict.fromkeys(("default", "reduce-overhead", "fullgraph"), "dynamo's 'eager' backend"),
}


#: The way in each target's runs take (tests/test_e2e_matrix.py's three): the variable, transfer-run, the import line.
WAY = {"cpu": "env", "npu": "env", "sdaa": "runner", "gcu": "import"}
IMPORT_LINE = "from transfer import auto as _\n"


def _script(target, tmp_path):
    """(path, line of torch.compile) of the script the target's way in runs."""
    if WAY[target] != "import":
        return NANOGPT, COMPILE_LINE
    script = tmp_path / "nanogpt_compile.py"
    script.write_text(IMPORT_LINE + open(NANOGPT).read())
    return str(script), COMPILE_LINE + 1


def _train(target, variant, tmp_path):
    log = str(tmp_path / f"log-{variant}")
    env = clean_env(TRANSFER_DEVICE=target if WAY[target] != "runner" else None,
                    PYTHONPATH=VENDORS if target != "cpu" else None,
                    SIM_ACCEL_STATS_DIR=str(tmp_path / f"stats-{variant}"),
                    TRANSFER_LOG=log if WAY[target] != "runner" else None,
                    # the cpu target's inductor: a cache private to the test, shared by its variants
                    TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    script, _ = _script(target, tmp_path)
    if WAY[target] == "runner":
        proc = run([console_script("transfer-run"), "--device", target, "--log", log, sys.executable, script,
                    *VARIANTS[variant]], env=env, timeout=900)
    else:
        proc = python(script, *VARIANTS[variant], env=env, timeout=900)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["stderr"] = proc.stderr
    stats = glob.glob(str(tmp_path / f"stats-{variant}" / "*.json"))
    result["stats"] = json.load(open(stats[0])) if stats else None
    logs = glob.glob(os.path.join(log, "*.jsonl"))
    result["log"] = [json.loads(line) for path in logs for line in open(path)]
    return result


def _nanogpt_compiled_trains_as_eager(target, tmp_path):
    script, line = _script(target, tmp_path)
    runs = {}
    # two processes at a time (the machine's cores); the default compile first, so that on the cpu target
    # the other variants find its inductor kernels in the test's cache
    for batch in (("eager", "default"), ("reduce-overhead", "fullgraph")):
        with ThreadPoolExecutor(2) as pool:
            runs.update(zip(batch, pool.map(lambda v: _train(target, v, tmp_path), batch)))
    eager = runs["eager"]
    device = "cpu" if target == "cpu" else f"{target}:0"
    assert eager["device"] == device and len(eager["losses"]) == 4
    assert eager["losses"][-1] < eager["losses"][0]  # it learns
    for variant in ("default", "reduce-overhead", "fullgraph"):
        run = runs[variant]
        assert run["device"] == device, variant
        # fp32: torch.testing's float32 tolerance (inductor's fused CPU kernels round differently)
        torch.testing.assert_close(run["losses"], eager["losses"], msg=lambda m: f"{variant}: {m}")
        notices = [line for line in run["stderr"].splitlines() if line.startswith("torch.compile at ")]
        if target == "cpu":  # inductor generates C++ for the CPU: nothing to say but that CPU code has no graphs
            if variant == "reduce-overhead":
                assert len(notices) == 1 and notices[0].startswith(
                    f"torch.compile at {script}:{line}: inductor runs as inductor without CUDA graphs: "), notices
            else:
                assert notices == [], run["stderr"]
            continue
        # one notice, naming the script's line, what inductor became and why
        assert len(notices) == 1, run["stderr"]
        assert notices[0].startswith(f"torch.compile at {script}:{line}: inductor runs as "
                                     f"{BECOMES[target][variant]}: "), notices
        records = [r for r in run["log"] if r["call"].startswith("torch.compile (inductor)")]
        assert [r["site"] for r in records] == [f"{script}:{line}"], run["log"]
        assert records[0]["became"].startswith(BECOMES[target][variant]), records
        compiled = run["stats"]["compiled_graphs"]
        if target == "npu":  # the vendor's own backend compiled the graph
            backend = "npugraphs" if variant == "reduce-overhead" else "npu"
            assert compiled == {backend: 1}, compiled
        else:
            assert compiled == {}, compiled


@pytest.mark.slow
def test_nanogpt_compiled_trains_as_eager_on_the_cpu_target(tmp_path):
    _nanogpt_compiled_trains_as_eager("cpu", tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(not STANDINS, reason=NO_STANDINS)
@pytest.mark.parametrize("vendor", ["npu", "sdaa", "gcu"])
def test_nanogpt_compiled_trains_as_eager_on_the_vendors(vendor, tmp_path):
    """npu through TRANSFER_DEVICE, sdaa through transfer-run, gcu through the import line (WAY)."""
    _nanogpt_compiled_trains_as_eager(vendor, tmp_path)


def _step(x):
    return torch.relu(x @ x.T).sum(dim=0) * 2 + 1


@pytest.mark.slow  # ~10 s: a compile on 2 cores
@pytest.mark.compat
def test_cuda_graphs_backend_runs_as_eager_on_the_cpu_target(cpu_target, caplog):
    """backend="cudagraphs" captures CUDA graphs; a CPU has none: each graph runs with dynamo's eager backend, computing
    what eager computes, with one notice naming the line (every torch: dynamo's backend registry)."""
    import torch._dynamo

    torch._dynamo.reset()
    x = torch.randn(4, 4, device="cuda")
    with caplog.at_level(logging.WARNING, logger="transfer"):
        line = sys._getframe().f_lineno + 1
        compiled = torch.compile(_step, backend="cudagraphs")
        first, second = compiled(x), compiled(x + 1)
    assert torch.equal(first, _step(x)) and torch.equal(second, _step(x + 1))
    notices = [r.getMessage() for r in caplog.records if r.getMessage().startswith("torch.compile at ")]
    assert len(notices) == 1, notices
    assert notices[0].startswith(f"torch.compile at {__file__}:{line}: cudagraphs runs as dynamo's 'eager' "
                                 "backend: a CPU has no graphs to capture"), notices


FABRIC_USER = """\
import torch
from lightning_fabric import Fabric  # rebinds torch.compile to a wrapper that records its arguments

model = torch.nn.Linear(4, 4).cuda()
compiled = torch.compile(model, backend="cudagraphs")
print("equal", torch.equal(compiled(torch.ones(2, 4, device="cuda")), model(torch.ones(2, 4, device="cuda"))))
"""


@pytest.mark.slow  # a fresh interpreter importing Lightning: ~10 s
def test_the_notice_names_the_scripts_line_when_a_library_wrapped_torch_compile(tmp_path):
    """Lightning's import rebinds torch.compile to its own wrapper (lightning_fabric/wrappers.py): the notice
    names the user's torch.compile line, not the wrapper's body (in the full suite, after a Lightning test,
    the notice named lightning_fabric/wrappers.py)."""
    try:
        import lightning_fabric  # noqa: F401
    except ImportError as exc:
        message = f"lightning is not installed: pip install -c tests/frameworks/constraints.txt pytorch-lightning ({exc})"
        if INSTALLED:
            pytest.fail(message)
        pytest.skip(message)
    script = tmp_path / "fabric_user.py"
    script.write_text(FABRIC_USER)
    proc = python(str(script), env=clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=None))
    assert "equal True" in proc.stdout, proc.stdout
    notices = [line for line in proc.stderr.splitlines() if "torch.compile at " in line]
    assert len(notices) == 1, proc.stderr
    assert f"torch.compile at {script}:5: cudagraphs runs as dynamo's 'eager' backend" in notices[0], notices


SPELLINGS = os.path.join(SCRIPTS, "compile_spellings.py")


@pytest.mark.slow
@pytest.mark.skipif(not STANDINS, reason=NO_STANDINS)
@pytest.mark.parametrize("vendor", ["npu", "gcu"])
def test_every_spelling_of_compile_computes_what_eager_computes_and_is_said_once_per_site(vendor, tmp_path):
    """torch.compile at its default, mode="max-autotune", dynamic=True, backend="inductor" with fullgraph=True,
    torch._dynamo.optimize("inductor"), @torch.compile, and a function with a graph break, after gpt-fast's
    inductor settings and TF32 (which never raise): each equals eager exactly (the same ops run), each call
    site is said once and logged, the graph break is logged, TF32 and coordinate_descent_tuning are reported."""
    env = clean_env(TRANSFER_DEVICE=vendor, PYTHONPATH=VENDORS, TRANSFER_LOG=str(tmp_path / "log"))
    proc = python(SPELLINGS, env=env, timeout=600)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "default": 0.0, "max-autotune": 0.0, "dynamic": 0.0, "inductor-spelled-out": 0.0, "dynamo.optimize": 0.0,
        "decorator": 0.0, "graph-break": 0.0}
    source = open(SPELLINGS).read().splitlines()
    code_starts = source.index("import torch")  # after the docstring
    lines = [i for i, text in enumerate(source, 1) if i > code_starts and not text.startswith("import")
             and ("torch.compile" in text or "torch._dynamo.optimize(" in text)]
    notices = [line for line in proc.stderr.splitlines() if line.startswith("torch.compile at ")]
    assert sorted(int(n.split(":")[1]) for n in notices) == sorted(lines), proc.stderr
    graphs = "torch_npu's 'npugraphs' backend" if vendor == "npu" else "dynamo's 'eager' backend"
    plain = "torch_npu's 'npu' backend" if vendor == "npu" else "dynamo's 'eager' backend"
    for notice in notices:
        line = int(notice.split(":")[1])
        assert f"inductor runs as {graphs if 'max-autotune' in source[line - 1] else plain}: " in notice, notice
    assert proc.stderr.count("float32 matmul precision 'high'") == 1, proc.stderr
    assert proc.stderr.count("coordinate_descent_tuning tunes the Triton kernels") == 1, proc.stderr
    records = [json.loads(line) for path in glob.glob(str(tmp_path / "log" / "*.jsonl")) for line in open(path)]
    compiled = sorted(int(r["site"].rsplit(":", 1)[1]) for r in records if r["call"].startswith("torch.compile ("))
    assert compiled == sorted(lines), records
    breaks = [r for r in records if r["call"].startswith("torch.compile graph break")]
    assert len(breaks) == 1 and "item()" in breaks[0]["call"], records

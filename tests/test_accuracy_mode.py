"""The accuracy mode (TRANSFER_COMPARE, transfer-run --compare; docs/accuracy.md).

The end-to-end tests drive nanoGPT's training script (tests/scripts/thirdparty/nanogpt_compile.py, eager)
many times in ONE process per target (tests/scripts/accuracy/driver.py), so the whole file costs four
start-ups:

* the cpu target: every mode on and off, in float32, bfloat16 and float16: the same losses to the last
  bit, no finding, and the float32 run's record (the two-run diff's reference);
* npu: the same, plus the recall: at least 20 different aten operations, forward and backward, made
  wrong in turn in the stand-in's kernels (k ULP, a wrong epsilon, a dropped term); the shadow check
  names exactly that operation and the line of the script that torch's own anomaly mode gives for it;
  NaN injected: the non-finite watch names the operation (the C watch and its Python twin alike); the
  two-run diff against the cpu record names the injected operation;
* npu, the LLaMA-style script (tests/scripts/accuracy/llama_train.py: RMSNorm, rotary embeddings,
  grouped-query attention, SwiGLU, bf16 autocast): the run untouched in float32, bfloat16 and float16, no
  finding; the recall over at least 20 different operations, forward and backward, under bf16 autocast;
* sdaa and gcu: the run untouched (mode on/off), no finding, the injected fault found.
"""

import importlib.util
import json
import os
import re
import sys

import pytest

from conftest import SCRIPTS, VENDORS, clean_env, console_script, needs_standins, python, run

SCRIPT = os.path.join(SCRIPTS, "thirdparty", "nanogpt_compile.py")
DRIVER = os.path.join(SCRIPTS, "accuracy", "driver.py")
ARGS = ["--compile=False", "--max_iters=2"]
MODES = ("nonfinite", "shadow")

#: (operation, phase, fault): every fault is made in the first call of the operation in that phase.
RECALL = [
    ("embedding", "forward", "ulp=256"), ("add", "forward", "ulp=256"),
    ("native_layer_norm", "forward", "eps=0.5"), ("addmm", "forward", "drop"), ("bmm", "forward", "ulp=256"),
    ("_safe_softmax", "forward", "ulp=256"), ("_unsafe_view", "forward", "ulp=256"), ("mul", "forward", "ulp=256"),
    ("clone", "forward", "ulp=256"), ("gelu", "forward", "ulp=256"), ("mm", "forward", "ulp=256"),
    ("_log_softmax", "forward", "ulp=256"), ("nll_loss_forward", "forward", "ulp=256"),
    ("nll_loss_backward", "backward", "ulp=256"), ("_log_softmax_backward_data", "backward", "ulp=256"),
    ("native_layer_norm_backward", "backward", "ulp=256"), ("sum", "backward", "ulp=256"),
    ("gelu_backward", "backward", "ulp=256"), ("_softmax_backward_data", "backward", "ulp=256"),
    ("embedding_dense_backward", "backward", "ulp=256"), ("bmm", "backward", "ulp=256"),
    ("mm", "backward", "ulp=256"), ("add", "backward", "ulp=256"), ("mul", "backward", "ulp=256"), ("cat", "backward", "ulp=256"),
]
NAN = [("gelu", "forward"), ("native_layer_norm_backward", "backward"), ("mm", "backward")]

LLAMA = os.path.join(SCRIPTS, "accuracy", "llama_train.py")
#: The LLaMA-style script under bf16 autocast: faults of 16 ULP in operations whose output is bf16 (the
#: linear layers, rotary embeddings, SwiGLU), 256 ULP in float32 ones (RMSNorm computes in float32, the
#: loss on float logits, attention's math on this device upcasts); 26 different operations.
LLAMA_RECALL = [
    ("embedding", "forward", "ulp=256"), ("pow", "forward", "ulp=256"), ("mean", "forward", "ulp=256"),
    ("add", "forward", "drop"), ("rsqrt", "forward", "ulp=256"), ("mul", "forward", "ulp=256"),
    ("mm", "forward", "ulp=16"), ("_unsafe_view", "forward", "ulp=16"), ("neg", "forward", "ulp=16"),
    ("cat", "forward", "ulp=16"), ("clone", "forward", "ulp=16"), ("_safe_softmax", "forward", "ulp=256"),
    ("bmm", "forward", "ulp=256"), ("silu", "forward", "ulp=16"), ("_log_softmax", "forward", "ulp=256"),
    ("nll_loss_forward", "forward", "ulp=256"), ("_foreach_norm", "forward", "ulp=256"),
    ("nll_loss_backward", "backward", "ulp=256"), ("_log_softmax_backward_data", "backward", "ulp=256"),
    ("mm", "backward", "ulp=16"), ("bmm", "backward", "ulp=256"), ("_softmax_backward_data", "backward", "ulp=256"),
    ("sigmoid", "backward", "ulp=16"), ("sub_", "backward", "ulp=16"), ("pow", "backward", "ulp=256"),
    ("mul", "backward", "ulp=256"), ("sum", "backward", "ulp=256"), ("slice_backward", "backward", "ulp=16"),
    ("embedding_dense_backward", "backward", "ulp=256"), ("div", "backward", "ulp=256"),
]


def drive(device, out_dir, jobs, timeout=480, script=SCRIPT, args=ARGS):
    path = os.pathsep.join(p for p in (VENDORS, os.environ.get("PYTHONPATH")) if p)  # a checkout's transfer too
    env = clean_env(TRANSFER_DEVICE=device, PYTHONPATH=path, TRANSFER_QUIET=1, TRANSFER_COMPARE=None,
                    SIM_ACCEL_FAULT=None)
    proc = python(DRIVER, script, str(out_dir), *jobs, "--", *args, env=env, timeout=timeout)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def findings(lines):
    return [line for line in lines if line["kind"] == "finding"]


def untouched_jobs(dtypes, record=None):
    jobs = []
    for dtype in dtypes:
        extra = f"#--dtype={dtype}"
        jobs += [f"off{extra}"] + [f"{m}{extra}" for m in MODES]
        if record and dtype == "float32":
            jobs.append(f"record:{record}{extra}")
    return jobs


def check_recall(results, jobs, recall, picture=True):
    """Each injected fault: the first finding is exactly that operation, in that phase, at the line of the
    script torch's anomaly mode gives for the operation's first call on the device."""
    oracle = results["oracle"]
    injected = {job: lines for job, _, lines in results["jobs"] if "@" in job}
    named = set()
    for op, phase, kind in recall:
        job = next(j for j in jobs if j.startswith(f"shadow@{op}:{kind},phase={phase}#"))
        lines = injected[job]
        found = findings(lines)
        assert found, f"{op} ({phase}, {kind}): nothing found: {lines[-1]}"
        expected = oracle.get(f"{op}|{phase}")
        assert expected, f"{op} is not run in the {phase} pass of the script (oracle: {sorted(oracle)})"
        assert (found[0]["op"], found[0]["phase"]) == (f"aten::{op}", phase), (op, phase, found[0])
        assert f"{os.path.basename(found[0]['site'])}" == expected, (op, phase, found[0]["site"], expected)
        named.add(op)
    assert len(named) >= 20 and {p for _, p, _ in recall} == {"forward", "backward"}
    return oracle, injected


def check_untouched(results, dtypes):
    """Per dtype: every mode's losses equal the mode-off losses bit for bit; no finding."""
    by_dtype = {}
    for job, losses, lines in results["jobs"]:
        dtype = job.partition("#--dtype=")[2]
        if dtype in dtypes and "@" not in job:
            by_dtype.setdefault(dtype, []).append((job, losses, lines))
    assert set(by_dtype) == set(dtypes)
    for dtype, runs in by_dtype.items():
        off = [losses for job, losses, _ in runs if job.startswith("off")][0]
        assert off and len(off) >= 2, runs
        for job, losses, lines in runs:
            assert [float(x).hex() for x in losses] == [float(x).hex() for x in off], (job, losses, off)
            assert not findings(lines), (job, findings(lines))
            if not job.startswith("off"):
                end = [line for line in lines if line["kind"] == "end"]
                assert end and end[0]["checked"] > 50, (job, end)  # it did look at the run


@pytest.fixture(scope="module")
def cpu_record(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu")
    record = str(out / "record.jsonl")
    results = drive("cpu", out, untouched_jobs(("float32", "bfloat16", "float16"), record))
    return results, record


@pytest.mark.slow
def test_cpu_target_run_untouched_and_clean(cpu_record):
    results, record = cpu_record
    check_untouched(results, ("float32", "bfloat16", "float16"))
    with open(record) as fh:
        entries = [json.loads(line) for line in fh]
    ops = [e for e in entries if "k" in e]
    assert len(ops) > 100
    assert all(set(e) >= {"shape", "dtype", "stride"} for e in ops)
    assert os.path.getsize(record) / len(ops) < 400  # a digest, never a tensor


@needs_standins
def test_npu_recall_untouched_and_two_run_diff(cpu_record, tmp_path):
    _, record = cpu_record
    jobs = ["oracle"] + untouched_jobs(("float32", "bfloat16", "float16"))
    jobs += [f"shadow@{op}:{kind},phase={phase}#--dtype=float32" for op, phase, kind in RECALL]
    jobs += [f"nonfinite{twin}@{op}:nan,phase={phase}#--dtype=float32" for op, phase in NAN for twin in ("", "!python")]
    jobs += [f"against:{record}@gelu:ulp=4096,phase=forward#--dtype=float32"]
    results = drive("npu", tmp_path, jobs)
    check_untouched(results, ("float32", "bfloat16", "float16"))
    oracle, injected = check_recall(results, jobs, RECALL)
    # the picture of the first divergent step: error per module along the network; over 1 exactly where the
    # faulty kernel ran (every GELU from the first call on: h.0.mlp.1 and h.1.mlp.1, forward)
    gelu = jobs.index("shadow@gelu:ulp=256,phase=forward#--dtype=float32")
    picture = [line for line in injected[jobs[gelu]] if line["kind"] == "modules"]
    assert picture and picture[0]["step"] == 0
    over = sorted(f"{r['module']}/{r['phase']}" for r in picture[0]["rows"] if r["error"] > 1)
    assert over == ["h.0.mlp.1/forward", "h.1.mlp.1/forward"], picture[0]["rows"]
    assert any(os.path.exists(tmp_path / f"{gelu}{ext}") for ext in (".png", ".txt"))
    if importlib.util.find_spec("matplotlib") is not None:  # the first picture drawn is a PNG (driver.py)
        assert any(name.endswith(".png") for name in os.listdir(tmp_path)), os.listdir(tmp_path)
    for op, phase in NAN:
        found = findings(injected[f"nonfinite@{op}:nan,phase={phase}#--dtype=float32"])
        assert found and found[0]["op"] == f"aten::{op}" and found[0]["phase"] == phase, (op, found)
        assert os.path.basename(found[0]["site"]) == oracle[f"{op}|{phase}"]
        # the Python watch (the C one's twin, transfer/compare/watch.py) names the same operation, line, step
        twin = findings(injected[f"nonfinite!python@{op}:nan,phase={phase}#--dtype=float32"])
        keys = ("op", "site", "module", "phase", "step", "index")
        assert twin and {k: twin[0][k] for k in keys} == {k: found[0][k] for k in keys}, (op, twin, found)
    found = findings(injected[f"against:{record}@gelu:ulp=4096,phase=forward#--dtype=float32"])
    assert found and found[0]["op"] == "aten::gelu" and found[0]["phase"] == "forward", found
    assert os.path.basename(found[0]["site"]) == oracle["gelu|forward"]


@needs_standins
def test_npu_llama_recall_and_clean_in_every_dtype(tmp_path):
    """The LLaMA-style script: mode on and off the same losses, no finding, in float32, bfloat16 and
    float16 (GradScaler); the recall under bf16 autocast (the script's default), one optimizer step each
    (the check stops at the end of the first divergent step)."""
    jobs = ["oracle"] + untouched_jobs(("float32", "bfloat16", "float16"))
    jobs += [f"shadow@{op}:{kind},phase={phase}#--max_iters=1" for op, phase, kind in LLAMA_RECALL]
    results = drive("npu", tmp_path, jobs, script=LLAMA, args=["--max_iters=2"])
    check_untouched(results, ("float32", "bfloat16", "float16"))
    check_recall(results, jobs, LLAMA_RECALL)


@needs_standins
@pytest.mark.parametrize("vendor", ["sdaa", "gcu"])
def test_other_standins_untouched_and_fault_found(vendor, tmp_path):
    jobs = untouched_jobs(("float32",)) + ["shadow@gelu_backward:ulp=256#--dtype=float32"]
    results = drive(vendor, tmp_path, jobs)
    check_untouched(results, ("float32",))
    found = findings(results["jobs"][-1][2])
    assert found and (found[0]["op"], found[0]["phase"]) == ("aten::gelu_backward", "backward"), found
    assert found[0]["module"] == "h.1.mlp.1"  # the last block's GELU: the first the backward pass reaches


@pytest.mark.parametrize("value, words", [
    ("shadw", "'shadw' is not a mode"),
    ("shadow:every=0", "every='0' is not a whole number"),
    ("shadow:steps=5-2", "is not a step range"),
    ("shadow:ratio.gelu.fp8=2", "KEY[.op][.dtype]"),
    ("record", "record needs a file"),
    ("against:/nonexistent/record.jsonl", "does not exist"),
    ("nonfinite:colour=red", "unknown option 'colour'"),
])
def test_bad_values_are_refused_with_the_fix(value, words):
    from transfer.compare.options import parse
    from transfer.errors import TransferError

    with pytest.raises(TransferError) as raised:
        parse(value)
    message = str(raised.value)
    assert words in message and "TRANSFER_COMPARE" in message and "docs/accuracy.md" in message
    assert "\n" not in message


def test_thresholds_and_sampling_parse():
    from transfer.compare.options import parse

    s = parse("shadow:every=10,steps=3-40,modules=h.0+lm_head,ops=aten::gelu+mm,ratio.gelu=4,ulp.bf16=2,"
              "ulp.gelu.bf16=3,cosine=0.95")
    assert (s.every, s.first_step, s.last_step, s.modules, s.ops) == (10, 3, 40, ("h.0", "lm_head"), ("gelu", "mm"))
    assert [s.step_checked(n) for n in (2, 3, 12, 13, 33, 43)] == [False, True, False, True, True, False]
    assert s.threshold("ratio", "gelu", "fp32") == 4 and s.threshold("ratio", "mm", "fp32") == 2
    assert s.threshold("ulp", "gelu", "bf16") == 3 and s.threshold("ulp", "mm", "bf16") == 2
    assert s.threshold("ulp", "mm", "fp32") == 32 and s.threshold("cosine", "mm", "fp16") == 0.95


def test_install_refuses_a_bad_value_and_the_launcher_says_so(tmp_path):
    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_COMPARE="shadow:every=x")
    proc = python("-c", "import torch", env=env, check=False, timeout=120)
    assert "TRANSFER_COMPARE='shadow:every=x'" in proc.stderr and "Traceback" not in proc.stderr
    proc = run([console_script("transfer-run"), "--device", "cpu", "--compare", "shadw", sys.executable, "-c",
                "pass"], env=clean_env(), check=False)
    assert proc.returncode == 2 and "--compare" in proc.stderr and "'shadw' is not a mode" in proc.stderr


@pytest.mark.slow
def test_distributed_each_rank_checks_and_the_merge_names_the_first(tmp_path):
    """2-rank DDP on the cpu target (gloo): rank 1's log of a zero count is the first non-finite value, at
    step 1; rank 0 sees it only in the all_reduce's output (its own inputs finite)."""
    from conftest import torchrun_standalone

    script = os.path.join(SCRIPTS, "accuracy", "ddp_metric.py")
    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1, TRANSFER_COMPARE="nonfinite:report=rank{rank}.jsonl")
    proc = python(*torchrun_standalone(2), script, env=env, cwd=str(tmp_path), timeout=240)
    # The two ranks share one stdout and print() writes its newline apart from its text: read objects, not lines.
    decoder = json.JSONDecoder()
    printed = [decoder.raw_decode(proc.stdout, m.start())[0] for m in re.finditer(r'\{"rank"', proc.stdout)]
    assert sorted(result["rank"] for result in printed) == [0, 1], proc.stdout
    lines = {r: [json.loads(line) for line in open(tmp_path / f"rank{r}.jsonl")] for r in (0, 1)}
    first = {r: findings(lines[r])[0] for r in (0, 1)}
    source = open(script).read().splitlines()
    log_line = next(i for i, text in enumerate(source, 1) if "counts.log()" in text)
    reduce_line = next(i for i, text in enumerate(source, 1) if "dist.all_reduce(log_count)" in text)
    assert (first[1]["op"], first[1]["step"], first[1]["rank"]) == ("aten::log", 1, 1), first[1]
    assert first[1]["site"].endswith(f"ddp_metric.py:{log_line}")
    assert first[0]["op"].startswith("c10d::allreduce") and first[0]["step"] == 1, first[0]
    assert first[0]["site"].endswith(f"ddp_metric.py:{reduce_line}")
    merged = python("-m", "transfer.compare", "rank0.jsonl", "rank1.jsonl", cwd=str(tmp_path),
                    env=clean_env(PYTHONPATH=os.environ.get("PYTHONPATH"))).stdout
    assert f"aten::log at ddp_metric.py:{log_line}" in merged and "step 1, rank 1:" in merged, merged


def test_transfer_run_compare_reports_at_exit(tmp_path):
    """The user's way in: ``transfer-run --compare`` on an unmodified script (nanoGPT's default
    ``torch.compile(model)``); one summary line at exit on stderr, which says that the compiled model ran
    eagerly, the report file per rank, the script's own output unchanged."""
    proc = run([console_script("transfer-run"), "--device", "cpu", "--compare", "nonfinite:every=2", sys.executable,
                SCRIPT, "--compile=True", "--max_iters=2"], env=clean_env(TRANSFER_QUIET=1), cwd=str(tmp_path),
               timeout=240)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["device"] == "cpu"
    summary = [line for line in proc.stderr.splitlines() if line.startswith("transfer compare")]
    report = tmp_path / "transfer-compare-rank0.jsonl"
    checked = json.loads(report.read_text().splitlines()[-1])["checked"]
    assert summary == [f"transfer compare (nonfinite): no divergence in {checked} operations checked, rank 0; "
                       "torch.compile regions ran eagerly (the mode checks each operation; without it they run "
                       f"compiled); report: {report}"], proc.stderr
    end = json.loads(report.read_text().splitlines()[-1])
    assert end["kind"] == "end" and end["steps"] == 2 and end["checked"] > 50

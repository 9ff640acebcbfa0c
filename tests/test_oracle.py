"""CUDA is the oracle: a CUDA script computes under transfer what it computes on CUDA.

tests/oracle/cuda_semantics.py is a CUDA script (probes and generated programs: tensor moves,
in-place ops, random-number calls, autocast regions); tests/oracle/cuda_expected.py holds CUDA's
answers to it, from torch's documented semantics and values recorded on a real GPU, and a
reference interpreter of CUDA's semantics for the programs. Here the script runs under transfer
on the cpu target and on every stand-in, through the environment way in, and every answer must
equal CUDA's, except the differences listed in KNOWN: those are what the Known limits
(docs/limits.md) state, and a KNOWN difference that disappears fails too (so the list stays exact).

On a machine with a GPU, ``python tests/oracle/cuda_semantics.py --check`` checks the oracle
itself against real CUDA.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings

from conftest import ROOT, VENDORS, clean_env, needs_standins, run

ORACLE = os.path.join(ROOT, "tests", "oracle")
sys.path.insert(0, ORACLE)
import cuda_expected  # noqa: E402
import cuda_semantics  # noqa: E402
from program_strategy import programs  # noqa: E402

COUNT = 2  # devices every target reports here
PROGRAMS = 40  # generated programs per target, besides the hypothesis ones

#: target -> {probe: {path prefix, ...}}: where the target cannot compute what CUDA computes. Every
#: difference must fall under a prefix, and every prefix must still match a difference. Each probe
#: named here is named in the Known limits, docs/limits.md (checked below).
KNOWN = {
    # docs/limits.md (Known limits): "cpu target, memory" and "cpu target, random numbers".
    "cpu": {
        "copy_pin_memory": {"/is_pinned"},
        "data_loader_pin_memory": {"/is_cuda", "/pinned"},
        "identity_device_tensor_cuda": {"/cuda_is_self", "/to_cuda_is_self"},
        "identity_device_tensor_cpu": {"/device_after[0]", "/device_after[1]", "/same_object"},
        "mixing_host_and_device": {"/sum"},
        "is_cuda_of_host_and_device": {"/host"},
        "device_ints": {"/0/index", "/1/index"},
        "device_strings": {"/cpu/factory/is_cuda", "/cpu:0/factory/is_cuda", "/cuda/factory/index",
                           "/cuda:0/factory/index", "/cuda:1/factory/index"},
        "rng_device_ops_leave_cpu_stream": {"/after_device_ops["},
        # host tensors are the target's tensors there: a kernel registered for CUDA runs for them too
        "library_cuda_kernel": {"/host"},
    },
    "npu": {},
    "sdaa": {},
    "gcu": {},
}
#: Programs may draw random numbers with ops on existing device tensors (uniform_, normal) on these
#: targets; on the others only device factories draw (KNOWN says why).
TENSOR_DRAWS = {"cpu": False, "npu": True, "sdaa": True, "gcu": True}


def observe(target):
    """The script's observations under TRANSFER_DEVICE=<target>, in a fresh process."""
    env = clean_env(TRANSFER_DEVICE=target, TRANSFER_QUIET="1", TRANSFER_CPU_DEVICES=COUNT,
                    SIM_ACCEL_DEVICE_COUNT=COUNT, TRANSFER_CPU_AMP_DTYPE="float16")
    for name in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "SDAA_VISIBLE_DEVICES", "TOPS_VISIBLE_DEVICES"):
        env.pop(name, None)  # all COUNT devices visible, whatever this machine's environment says
    if target != "cpu":
        env["PYTHONPATH"] = os.pathsep.join([VENDORS] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    args = [sys.executable, os.path.join(ORACLE, "cuda_semantics.py"), "--observe", "--programs", "0"]
    out = run(args, env=env, timeout=600).stdout
    if target != "cpu":  # torch's own message lists the PrivateUse1 device by the name the plug-in gave it
        out = out.replace(f", {target} device type", ", privateuseone device type")
    probes = json.loads(out)["probes"]
    programs = {}
    script = ("import json, sys; sys.path.insert(0, sys.argv[1]); import cuda_semantics as c; "
              f"print(json.dumps([c.run_program(c.program(s, tensor_draws={TENSOR_DRAWS[target]})) "
              f"for s in range({PROGRAMS})]))")
    for seed, value in enumerate(json.loads(run([sys.executable, "-c", script, ORACLE], env=env, timeout=600).stdout)):
        programs[seed] = value
    return probes, programs


def probe_differences(probes):
    table = cuda_expected.expected_probes(COUNT, cuda_semantics.DEVICE_STRINGS)
    found = {}
    for name, (expected, _source) in table.items():
        diffs = cuda_expected.differences(probes.get(name, {"missing": True}), expected)
        if diffs:
            found[name] = diffs
    return found


def check_target(target):
    probes, programs = observe(target)
    found = probe_differences(probes)
    unexpected, vanished = {}, []
    for name in sorted(set(found) | set(KNOWN[target])):
        paths = [d.partition(": ")[0] for d in found.get(name, ())]
        known = KNOWN[target].get(name, ())
        stray = [d for d, p in zip(found.get(name, ()), paths) if not any(p.startswith(k) for k in known)]
        if stray:
            unexpected[name] = stray
        vanished += [f"{name}{k}" for k in known if not any(p.startswith(k) for p in paths)]
    assert not unexpected and not vanished, (
        f"{target}: probes that differ from CUDA (not in KNOWN): {json.dumps(unexpected, indent=1)}\n"
        f"KNOWN differences that no longer occur (remove them from KNOWN and docs/limits.md): {vanished}")
    bad = {}
    for seed, observed in programs.items():
        ops = cuda_semantics.program(seed, tensor_draws=TENSOR_DRAWS[target])
        diffs = cuda_expected.differences(observed, cuda_expected.model_program(ops, COUNT))
        if diffs:
            bad[seed] = {"ops": ops, "differences": diffs}
    assert not bad, f"{target}: programs that compute something else than CUDA: {json.dumps(bad, indent=1)[:6000]}"


@pytest.mark.slow
def test_cpu_target_computes_what_cuda_computes():
    check_target("cpu")


@needs_standins
@pytest.mark.parametrize("target", ["npu", "sdaa", "gcu"])
def test_standin_computes_what_cuda_computes(target):
    check_target(target)


@needs_standins
@pytest.mark.parametrize("target", ["npu", "sdaa", "gcu"])
def test_generated_programs_on_the_standins(target, tmp_path):
    """hypothesis, in a child process where the stand-in is imported (tests/oracle/programs_property.py)."""
    env = clean_env(TRANSFER_DEVICE=target, TRANSFER_QUIET="1", SIM_ACCEL_DEVICE_COUNT=COUNT,
                    ORACLE_DEVICE_COUNT=COUNT, ORACLE_TENSOR_DRAWS="1" if TENSOR_DRAWS[target] else "0")
    for name in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "SDAA_VISIBLE_DEVICES", "TOPS_VISIBLE_DEVICES"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([VENDORS] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    result = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                  os.path.join(ORACLE, "programs_property.py")], env=env, timeout=900, check=False)
    assert result.returncode == 0 and " passed" in result.stdout, result.stdout[-6000:] + result.stderr[-3000:]


def test_known_limits_are_in_the_limits_page():
    with open(os.path.join(ROOT, "docs", "limits.md"), encoding="utf-8") as fh:
        limits = fh.read()
    for target, probes in KNOWN.items():
        for name in probes:
            assert f"`{name}`" in limits, f"docs/limits.md does not name {target}'s difference `{name}`"


# ------------------------------------------------------------------ hypothesis, in this process


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ops=programs(tensor_draws=TENSOR_DRAWS["cpu"]))
def test_generated_programs_on_the_cpu_target(install_cpu, ops):
    import transfer

    transfer.uninstall()
    expected = cuda_expected.model_program(ops, COUNT)  # CUDA's semantics, computed without the shim
    install_cpu(TRANSFER_CPU_DEVICES=COUNT, TRANSFER_CPU_AMP_DTYPE="float16", CUDA_VISIBLE_DEVICES=None)
    observed = cuda_semantics.run_program(ops)
    diffs = cuda_expected.differences(observed, expected)
    assert not diffs, f"{ops}\n" + "\n".join(diffs)

"""A DeepLearningExamples-style trainer with CUDA graphs (make_graphed_callables, AMP, GradScaler,
DataLoader, schedule, evaluation), unmodified, on the cpu target and the npu stand-in (NPUGraph):
the graphed run computes what the eager run computes, on the device, and the model learns."""

import os

import pytest

from conftest import NO_STANDINS, SCRIPTS, STANDINS, VENDORS, clean_env, python

SCRIPT = os.path.join(SCRIPTS, "graphs", "graphed_trainer.py")


KEEP = ("losses", "parameters", "learned")


def _run(device, graphs, **env):
    env = clean_env(TRANSFER_DEVICE=device, TRANSFER_QUIET=None, **env)
    proc = python("-W", "ignore::FutureWarning", SCRIPT, "--cuda-graphs", graphs, "--amp", "--epochs", "2",
                  env=env, timeout=600)
    pick = [ln for ln in proc.stdout.splitlines() if ln.startswith(KEEP)]
    assert len(pick) == 3 and pick[2] == "learned True", proc.stdout + proc.stderr
    return proc, pick


@pytest.mark.slow
def test_graphed_trainer_on_the_cpu_target():
    """The cpu target runs make_graphed_callables' callables eagerly (said), so one run: it trains on the
    (virtual) CUDA device and learns."""
    graphed, pick = _run("cpu", "on")
    assert pick[1].endswith("on cpu")
    assert "make_graphed_callables on the cpu target: the callables run eagerly" in graphed.stderr, graphed.stderr


@pytest.mark.slow
@pytest.mark.skipif(not STANDINS, reason=NO_STANDINS)
def test_graphed_trainer_on_the_npu_stand_in():
    graphed, pick = _run("npu", "on", PYTHONPATH=VENDORS)
    assert pick == _run("npu", "off", PYTHONPATH=VENDORS)[1]  # the eager run is the oracle
    assert pick[1].endswith("on npu:0")
    assert "run eagerly" not in graphed.stderr  # NPUGraph captured and replayed (the stand-in is as strict as torch_npu)

"""The accuracy mode's two levels (transfer/compare/sentinels.py, replay.py): the cheap level plus its replay
names the same first operation as the per-operation watch.

In process, on the cpu target: each case trains a small model a few steps with a NaN or inf made on purpose
somewhere (inside a module, in an in-place operation, in the backward pass, in a functional call outside every
module, in the optimizer's step, under dropout, in the second call of a module), under ``nonfinite`` (the cheap
level) and ``nonfinite:exact`` (every operation watched), with the C watch and its Python twin: the finding's
operation, line, module, phase and step are the same four times, and are the ones the case expects. Masks
filled with -inf are no finding for either level. The cheap level's documented blind spot (an inf made and
dropped inside one module, never in a module's output, gradient or parameter) is asserted as documented.
The stand-in runs (tests/test_accuracy_mode.py) do the same on the npu stand-in, where tensors live on a device.
"""

import json
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import transfer
from transfer import compare
from transfer.compare import watch

HERE = os.path.abspath(__file__)
KEYS = ("op", "site", "module", "phase", "step")


def line_of(marker):
    with open(HERE) as fh:
        for number, text in enumerate(fh, 1):
            if text.rstrip().endswith(f"# {marker}"):
                return f"{HERE}:{number}"
    raise AssertionError(marker)


class Block(nn.Module):
    def __init__(self, poison):
        super().__init__()
        self.poison = poison
        self.gain = 1.001 if poison == "scale" else 1.0  # "scale": computes otherwise, with the same operations
        self.fc = nn.Linear(16, 16)
        self.drop = nn.Dropout(0.3)
        self.register_buffer("mask", torch.tril(torch.ones(16, 16)) == 0)

    def forward(self, x):
        h = self.drop(torch.relu(self.fc(x)))
        scores = (h @ h.t())[:, :16].masked_fill(self.mask[: h.shape[0]], float("-inf"))  # a mask: on purpose
        h = h + torch.softmax(scores, dim=-1) @ h[:16]
        if self.poison == "forward":
            h = torch.log(h - 3.0)  # POISON forward
        if self.poison == "inplace":
            h = h.clone()
            h.sub_(2.0).log_()  # POISON inplace
        if self.poison == "backward":
            h = torch.sqrt(h * 0.0)  # POISON backward
        if self.poison == "dropped":
            h = torch.where(h > 0.5, torch.log(h - 0.5), h)  # POISON dropped
        return h * self.gain  # POISON scale


class Net(nn.Module):
    def __init__(self, poison):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.blocks = nn.Sequential(Block(None), Block(poison))
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.embed(x))))


def train(value, python, folder, poison=None, steps=3):
    """`steps` training steps under the mode `value` (the C or Python watch); the report's finding or None."""
    torch.manual_seed(0)
    model = Net(poison).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=0.0 if poison == "optimizer" else 1e-8)
    if poison == "optimizer":
        model.head.bias.register_hook(lambda g: torch.zeros_like(g))  # a zero gradient: Adam's 0/0 with eps=0
    x, y = torch.randn(16, 8).cuda(), torch.randint(4, (16,)).cuda()
    report = os.path.join(folder, f"report-{'py' if python else 'c'}-{value.replace(':', '-')}.jsonl")
    sep = "," if ":" in value else ":"
    session = compare.start(compare.parse(f"{value}{sep}report={report}"), "cpu", python=python)
    assert isinstance(session.mode, watch.PyWatch) == python
    for step in range(steps):
        if poison in ("later", "scale_later") and step == 1:
            if poison == "later":
                model.blocks[1].poison = "forward"
            else:
                model.blocks[1].gain = 1.001
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if poison == "functional":
            loss = loss + torch.log(logits - logits).mean() * 0  # POISON functional
        if poison == "functional_backward":
            loss = loss + (logits - logits.detach()).pow(0.5).sum()  # POISON functional_backward
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()  # OPTIMIZER STEP
    import sys

    saved, sys.stderr = sys.stderr, open(os.devnull, "w")
    try:
        compare.stop()
    finally:
        sys.stderr.close()
        sys.stderr = saved
    with open(report) as fh:
        lines = [json.loads(line) for line in fh]
    found = [line for line in lines if line["kind"] == "finding"]
    return (found[0] if found else None), lines


@pytest.fixture
def cpu(monkeypatch, tmp_path):
    transfer.uninstall()
    for name in ("TRANSFER_DISABLE", "TRANSFER_STRICT", "TRANSFER_COMPARE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRANSFER_QUIET", "1")
    monkeypatch.chdir(tmp_path)
    transfer.install("cpu")
    yield tmp_path
    compare.stop()
    transfer.uninstall()


#: the watches to run: the Python one, and the C one where it is built (`python=False`)
TWINS = [True] + ([False] if watch.c_type() is not None else [])

#: (poison, operation, phase, module, step): what the per-operation watch names for each case
CASES = [
    ("forward", "aten::log", "forward", "blocks.1", 0),
    ("inplace", "aten::log_", "forward", "blocks.1", 0),
    ("backward", "aten::div", "backward", "blocks.1", 0),
    ("functional", "aten::log", "forward", "", 0),
    ("functional_backward", "aten::pow", "backward", "", 0),
    ("optimizer", "aten::addcdiv_", "forward", "", 0),
    ("later", "aten::log", "forward", "blocks.1", 1),
]


@pytest.mark.parametrize("poison, op, phase, module, step", CASES, ids=[c[0] for c in CASES])
def test_the_cheap_level_names_the_operation_the_watch_names(cpu, poison, op, phase, module, step):
    found = {}
    for python in TWINS:
        for value in ("nonfinite", "nonfinite:exact"):
            found[(value, python)], _ = train(value, python, cpu, poison)
    exact = found[("nonfinite:exact", True)]
    assert exact is not None, poison
    assert (exact["op"], exact["phase"], exact["module"], exact["step"]) == (op, phase, module, step), exact
    for key, finding in found.items():
        assert finding is not None, (poison, key)
        assert {k: finding[k] for k in KEYS} == {k: exact[k] for k in KEYS}, (poison, key, finding, exact)
    marker = {"later": "POISON forward", "optimizer": "OPTIMIZER STEP"}.get(poison, f"POISON {poison}")
    assert exact["site"] == line_of(marker), exact


def test_masks_are_no_finding_at_either_level(cpu):
    for value in ("nonfinite", "nonfinite:exact"):
        finding, lines = train(value, False, cpu)
        assert finding is None, (value, finding)
        end = [line for line in lines if line["kind"] == "end"][0]
        assert end["checked"] > 20 and end["steps"] == 3


def test_an_inf_made_and_dropped_inside_a_module_is_seen_by_the_exact_watch_only(cpu):
    """docs/accuracy.md: the cheap level sees module outputs, gradients and parameters; an inf that never
    reaches one (a safe log: ``where(x > c, log(x - c), x)``) is found by ``nonfinite:exact`` alone."""
    cheap, _ = train("nonfinite", False, cpu, "dropped")
    exact, _ = train("nonfinite:exact", False, cpu, "dropped")
    assert cheap is None
    assert exact is not None and exact["op"] == "aten::log" and exact["site"] == line_of("POISON dropped")


@pytest.mark.parametrize("python", TWINS, ids=lambda p: "python" if p else "c")
def test_against_names_the_first_operation_or_module_call_that_differs(cpu, python):
    """A record (its first step operation by operation, the others by the cheap level) and a run that computes
    otherwise from step 0, or from step 1: against names the operation in step 0 (its line), the first module
    call whose output differs in step 1; the same run again finds nothing, every digest matched."""
    record = "record.jsonl"  # in the test's folder (the fixture's working directory)
    assert train(f"record:{record}", python, cpu)[0] is None
    with open(record) as fh:
        steps = {json.loads(line)["k"][0] for line in fh if '"k"' in line}
    assert steps == {0, 1, 2}
    same, lines = train(f"against:{record}", python, cpu)
    assert same is None and not [line for line in lines if "no counterpart" in line.get("text", "")], lines
    first, _ = train(f"against:{record}", python, cpu, "scale")
    assert (first["op"], first["phase"], first["module"], first["step"]) == ("aten::mul", "forward", "blocks.1", 0)
    assert first["site"] == line_of("POISON scale")
    later, _ = train(f"against:{record}", python, cpu, "scale_later")
    assert (later["op"], later["phase"], later["module"], later["step"]) == \
        ("output of Block", "forward", "blocks.1", 1), later


def test_the_replay_leaves_the_run_untouched(cpu):
    """A run whose forward, backward and optimizer step are replayed computes what it computes without the mode
    (random numbers, BatchNorm statistics, optimizer state): the losses are the same to the bit."""
    def losses(value):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Dropout(0.5), nn.Linear(16, 4)).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=0.0)
        x = torch.randn(16, 8).cuda()
        model[3].bias.register_hook(lambda g: torch.zeros_like(g))  # Adam's 0/0: replays in step 0
        if value:
            compare.start(compare.parse(f"{value}:report={cpu / 'u.jsonl'}"), "cpu")
        out = []
        for _ in range(3):
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(float(loss))
        out.append(model[1].running_mean.sum().item())
        if value:
            import sys

            saved, sys.stderr = sys.stderr, open(os.devnull, "w")
            try:
                compare.stop()
            finally:
                sys.stderr.close()
                sys.stderr = saved
        return [v.hex() if v == v else "nan" for v in out]

    assert losses("nonfinite") == losses(None)

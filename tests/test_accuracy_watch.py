"""The accuracy mode's two watches (transfer/compare/watch.py): the C one and its Python twin see one run.

In process, on the cpu target, where the C watch reads outputs in place (scans them for inf/NaN, takes
their digests) and the Python one asks torch, every operation watched (``exact``; the cheap level that
runs otherwise has its own tests, tests/test_accuracy_levels.py): the same first non-finite operation, forward and backward,
with the same line, module and step; masks filled with -inf are no finding for either; the same digests
(keys, shapes, strides; values to rounding), and each one's record replayed against the other's finds
nothing; every dtype the C watch reads, read as torch reads it. The stand-in runs
(tests/test_accuracy_mode.py) drive both on the npu stand-in, where outputs live on a device.
"""

import json
import math
import os

import pytest
import torch

from transfer import compare
from transfer.compare import digest, watch

from test_accuracy_levels import cpu  # noqa: F401 (the fixture: the cpu target, the accuracy mode stopped after)

needs_ext = pytest.mark.skipif(watch.c_type() is None, reason="transfer.compare._watch is not built here "
                               "(`python setup.py build_ext --inplace`)")
HERE = os.path.abspath(__file__)


def line_of(marker):
    with open(HERE) as fh:
        for number, text in enumerate(fh, 1):
            if text.rstrip().endswith(f"# {marker}"):
                return f"{HERE}:{number}"
    raise AssertionError(marker)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 4)
        self.register_buffer("mask", torch.tril(torch.ones(8, 8))[:1].expand(4, 8) == 0)

    def forward(self, x, poison=None):
        h = torch.relu(self.fc(x))
        weights = torch.softmax(h.masked_fill(self.mask, float("-inf")), dim=-1)  # a mask: on purpose
        h = h * weights
        if poison == "forward":
            h = torch.log(h - 5.0)  # POISON forward
        y = self.head(h)
        if poison == "backward":
            y = torch.sqrt(y.clamp(min=0.0))  # POISON backward
        return y.sum()


def train(value, python, folder, poison=None, steps=2, dtype=torch.float32):
    """`steps` training steps of Net under the mode `value` with the C (or Python) watch; the report's lines."""
    torch.manual_seed(0)
    model = Net().cuda().to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8).cuda().to(dtype)
    report = os.path.join(folder, f"report-{'py' if python else 'c'}-{value.split(':')[0]}.jsonl")
    sep = "," if ":" in value else ":"
    session = compare.start(compare.parse(f"{value}{sep}report={report}"), "cpu", python=python)
    assert isinstance(session.mode, watch.PyWatch) == python
    for _ in range(steps):
        loss = model(x, poison)
        opt.zero_grad()
        loss.backward()
        opt.step()
    devnull = open(os.devnull, "w")
    import sys

    saved, sys.stderr = sys.stderr, devnull
    try:
        compare.stop()
    finally:
        sys.stderr = saved
        devnull.close()
    with open(report) as fh:
        return [json.loads(line) for line in fh]


def finding(lines):
    found = [line for line in lines if line["kind"] == "finding"]
    return found[0] if found else None


def checked(lines):
    return [line for line in lines if line["kind"] == "end"][0]["checked"]


@needs_ext
@pytest.mark.parametrize("poison, op, phase", [("forward", "aten::log", "forward"),
                                               ("backward", "aten::div", "backward")])
def test_both_watches_name_the_same_first_nonfinite_operation(cpu, poison, op, phase):
    c, py = (finding(train("nonfinite:exact", python, cpu, poison)) for python in (False, True))
    assert c is not None and py is not None
    where = {k: c[k] for k in ("op", "site", "module", "phase", "step", "index")}
    assert where == {k: py[k] for k in where}, (c, py)
    assert (c["op"], c["phase"], c["step"]) == (op, phase, 0), c
    assert c["site"] == line_of(f"POISON {poison}") and c["module"] == "Net", c  # the outermost: its type


@needs_ext
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_masks_are_no_finding_and_both_watches_check_as_many(cpu, dtype):
    c, py = (train("nonfinite:exact", python, cpu, dtype=dtype) for python in (False, True))
    assert finding(c) is None and finding(py) is None
    assert checked(c) == checked(py) > 50


@needs_ext
def test_both_watches_take_the_same_digests_and_replay_each_others_record(cpu):
    records = {}
    for python in (False, True):
        path = str(cpu / f"record-{python}.jsonl")
        assert finding(train(f"record:{path},exact", python, cpu)) is None
        with open(path) as fh:
            records[python] = [json.loads(line) for line in fh if '"k"' in line]
    c, py = records[False], records[True]
    assert len(c) == len(py) > 40
    for a, b in zip(c, py):
        assert {k: a[k] for k in ("k", "shape", "dtype", "stride")} == {k: b[k] for k in ("k", "shape", "dtype", "stride")}
        assert ("v" in a) == ("v" in b)
        for x, y in zip(a.get("v", ()), b.get("v", ())):
            assert x == y or (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12), (a, b)
    for python in (False, True):  # each watch against the other's record: the same run, no divergence
        lines = train(f"against:{cpu / f'record-{not python}.jsonl'},exact", python, cpu)
        assert finding(lines) is None and checked(lines) == len(c)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]


def poke(dtype, value, where):
    x = torch.linspace(-3, 3, 35).reshape(5, 7)
    if not dtype.is_floating_point:
        x = (x * 10).clamp(min=0 if dtype in (torch.uint8, torch.bool) else -100)
    x = x.to(dtype)
    if value is not None:
        x.view(-1)[where] = value
    return x


@needs_ext
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_c_watch_reads_every_dtype_as_torch_does(cpu, dtype):
    """Digests of a contiguous host output (the C watch's, in place) against torch's reading in float64;
    inf/NaN at the first, a middle and the last element found in every floating dtype."""
    tensors = [poke(dtype, None, 0)]
    if dtype.is_floating_point:
        tensors += [poke(dtype, v, i) for v in (float("inf"), float("-inf"), float("nan")) for i in (0, 17, 34)]
    for x in tensors:
        path = str(cpu / "one.jsonl")
        session = compare.start(compare.parse(f"record:{path},report={cpu / 'r.jsonl'}"), "cpu")
        assert not isinstance(session.mode, watch.PyWatch)
        y = x.clone()  # ONE
        compare.stop()
        with open(path) as fh:
            entry = [json.loads(line) for line in fh if '"k"' in line][0]
        assert entry["k"][2] == "clone" and entry["k"][3] == os.path.basename(line_of("ONE"))
        expected = digest.values_now(y)
        for got, want in zip(entry["v"], expected):
            assert got == want or (math.isnan(got) and math.isnan(want)) or math.isclose(got, want, rel_tol=1e-12), \
                (dtype, entry["v"], expected)
        if dtype.is_floating_point:
            for python in (False, True):
                compare.start(compare.parse(f"nonfinite:report={cpu / 'n.jsonl'}"), "cpu", python=python)
                x.clone()
                compare.stop()
                with open(cpu / "n.jsonl") as fh:
                    found = finding([json.loads(line) for line in fh])
                holds = not bool(torch.isfinite(x).all())
                assert (found is not None) == holds and (not holds or found["op"] == "aten::clone"), (dtype, x, found)


@needs_ext
def test_a_strided_output_is_read_by_torch_and_found_alike(cpu):
    """An output the C watch does not read in place (not contiguous): the session's reading, the same answer."""
    x = poke(torch.float32, float("nan"), 3).t()
    for python in (False, True):
        compare.start(compare.parse(f"nonfinite:report={cpu / 'n.jsonl'}"), "cpu", python=python)
        y = x.clone()
        compare.stop()
        assert not y.is_contiguous()
        with open(cpu / "n.jsonl") as fh:
            found = finding([json.loads(line) for line in fh])
        assert found is not None and found["op"] == "aten::clone", found


def test_without_the_c_watch_the_python_one_runs(cpu, monkeypatch):
    monkeypatch.setattr(watch, "_C_TYPE", None)  # as where it was not built
    session = compare.start(compare.parse(f"nonfinite:report={cpu / 'n.jsonl'}"), "cpu")
    assert isinstance(session.mode, watch.PyWatch)
    compare.stop()

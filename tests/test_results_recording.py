"""docs/results.py records a run's junit file without the paths of the machine that ran it.

pytest writes absolute paths into junit messages (a skip's location, a traceback): the copy of the test tree
a nox session ran, a virtual environment's site-packages, pytest's temporary folders, the checkout. A
recorded file (docs/results/, committed) keeps the run (its counts, skip reasons, outcomes) and none of them.
"""

import glob
import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "docs"))
import results  # noqa: E402

MACHINE = "/home/runner/work/checkout"
JUNIT = f"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="2" tests="4" time="3.5"
 timestamp="2026-11-20T10:00:00.000000" hostname="h">
<properties><property name="torch" value="2.6.0+cu124"/><property name="python" value="3.10.13"/></properties>
<testcase classname="tests.test_a" name="test_ok" file=".nox/tree-compat-2.6.0/tests/test_a.py" time="1"/>
<testcase classname="tests.test_a" name="test_bad" time="1"><failure message="AssertionError: {MACHINE}/.nox/compat-torch-2.6.0/lib/python3.10/site-packages/torch/nn/x.py">{MACHINE}/.nox/tree-compat-2.6.0/tests/test_a.py:12: in test_bad
  open(&quot;/tmp/pytest-of-runner/pytest-7/test_bad0/log&quot;)
{ROOT}/examples/train_cuda.py:3: AssertionError</failure></testcase>
<testcase classname="tests.test_a" name="test_s1" time="0"><skipped message="no PrivateUse1 here">{MACHINE}/.nox/tree-compat-2.6.0/tests/test_a.py:20: no PrivateUse1 here</skipped></testcase>
<testcase classname="tests.test_a" name="test_s2" time="0"><skipped message="collection skipped">('{MACHINE}/.nox/tree-compat-2.6.0/tests/test_b.py', 22, "Skipped: no b")</skipped></testcase>
</testsuite></testsuites>
"""


def test_a_recorded_run_keeps_its_results_and_none_of_the_machines_paths(tmp_path):
    ran = tmp_path / "junit" / "compat-torch-2.6.0.xml"
    ran.parent.mkdir()
    ran.write_text(JUNIT)
    recorded = results.record(str(ran), str(tmp_path / "recorded"))
    text = open(recorded, encoding="utf-8").read()
    assert MACHINE not in text and ROOT not in text and "pytest-of-runner" not in text, text
    assert "tests/test_a.py:12: in test_bad" in text and "site-packages/torch/nn/x.py" in text
    assert "examples/train_cuda.py:3" in text and "('tests/test_b.py', 22" in text
    assert 'file=".nox/tree-compat-2.6.0/tests/test_a.py"' in text  # pytest's relative path: left as it is
    before, after = results.read(str(ran)), results.read(recorded)
    assert after == before and after.counts == (1, 1, 2)
    assert results.record(recorded, os.path.dirname(recorded)) == recorded  # in place: unchanged
    assert open(recorded, encoding="utf-8").read() == text


def test_the_committed_runs_hold_no_machine_path():
    files = glob.glob(os.path.join(results.RECORDED, "*.xml"))
    assert files
    for path in files:
        text = open(path, encoding="utf-8").read()
        assert results.strip_machine_paths(text) == text, f"{path}: run `python docs/results.py --record {path}`"

"""docs/results.md's tables are docs/results.py's output from the junit files of real runs (docs/results/)."""

import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "docs"))
import results  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="2" tests="7" time="12.5"
 timestamp="2026-11-20T10:00:00.000000" hostname="h">
<properties><property name="torch" value="2.6.0+cu124"/><property name="python" value="3.10.13"/></properties>
<testcase classname="tests.test_a" name="test_ok" time="1"/>
<testcase classname="tests.test_a" name="test_ok2" time="1"/>
<testcase classname="tests.test_a" name="test_ok3" time="1"/>
<testcase classname="tests.test_a" name="test_bad" time="1"><failure message="boom">x</failure></testcase>
<testcase classname="tests.test_a" name="test_err" time="1"><error message="setup">x</error></testcase>
<testcase classname="tests.test_a" name="test_s1" time="0"><skipped message="no PrivateUse1 here"/></testcase>
<testcase classname="tests.test_a" name="test_s2" time="0"><skipped message="no PrivateUse1 here"/></testcase>
</testsuite></testsuites>
"""


def test_a_row_is_the_counts_and_date_of_its_run(tmp_path):
    (tmp_path / "compat-torch-2.6.0.xml").write_text(JUNIT)
    (tmp_path / "notes.xml").write_text("<x/>")  # not a run's file: ignored
    (run,) = results.runs(str(tmp_path))
    assert (run.session, run.torch, run.python, run.date) == ("compat", "2.6.0", "3.10.13", "2026-11-20")
    assert run.counts == (3, 2, 2)  # passed = tests - failures - errors - skipped
    row = results.table([run]).splitlines()[2]
    assert row == ("| 2.6.0 | 3.10.13 | compat suite (`-m compat`) (`nox -s compat -- 2.6.0`) | 3 | 2 | "
                   "2 (2 x no PrivateUse1 here) | 12 s | 2026-11-20 |")


def test_the_results_tables_are_what_the_recorded_runs_say():
    assert results.check() == [], "run `nox -s results` (docs/results.md's tables were edited or docs/results changed)"


def test_a_run_that_counts_differently_from_its_row_is_named(tmp_path, monkeypatch):
    recorded, fresh = tmp_path / "recorded", tmp_path / "fresh"
    recorded.mkdir(), fresh.mkdir()
    (recorded / "compat-torch-2.6.0.xml").write_text(JUNIT)
    monkeypatch.setattr(results, "RECORDED", str(recorded))
    (fresh / "compat-torch-2.6.0.xml").write_text(JUNIT)
    assert results.drift(str(fresh)) == []  # counted the same
    (fresh / "compat-torch-2.6.0.xml").write_text(JUNIT.replace('tests="7"', 'tests="8"'))  # 4 passed, 2 failed
    (fresh / "compat-torch-2.9.1.xml").write_text(JUNIT.replace("2.6.0+cu124", "2.9.1"))  # no row: nothing to say
    notices = results.drift(str(fresh))
    assert len(notices) == 1 and "compat on torch 2.6.0: this run gave 4 passed, 2 failed, 2 skipped" in notices[0]
    assert "says 3 / 2 / 2" in notices[0]


def test_failures_names_each_failed_test_with_the_end_of_its_traceback(tmp_path):
    """What .ci/run prints last on a failure: each failed or erroring test, the end of its text, no machine path."""
    trace = "\n".join(f"line {i}" for i in range(100))
    trace += "\n/home/ci/work/.nox/tree-tests/tests/test_a.py:7: AssertionError"
    junit = JUNIT.replace('<failure message="boom">x</failure>',
                          f'<failure message="boom">{trace}</failure><system-err>rank 1 aborted</system-err>')
    (tmp_path / "tests-torch-2.13.0.xml").write_text(junit)
    (tmp_path / "compat-torch-2.6.0.xml").write_text(JUNIT.replace('<failure message="boom">x</failure>', ""))
    text = results.failures(str(tmp_path), lines=5)
    assert "===== tests-torch-2.13.0.xml: FAILURE tests.test_a::test_bad" in text
    assert "===== tests-torch-2.13.0.xml: ERROR tests.test_a::test_err" in text
    assert "===== compat-torch-2.6.0.xml: ERROR tests.test_a::test_err" in text
    assert "tests/test_a.py:7: AssertionError" in text and "/home/ci" not in text and "line 50" not in text
    assert "rank 1 aborted" in text
    assert "test_ok" not in text and "test_s1" not in text
    assert results.failures(str(tmp_path), limit=100).endswith("more characters)")
    (tmp_path / "tests-torch-2.13.0.xml").unlink()
    (tmp_path / "compat-torch-2.6.0.xml").unlink()
    assert results.failures(str(tmp_path)) == ""

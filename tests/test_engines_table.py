"""docs/engines.md's table is docs/engines.py's output from the junit files of real runs (docs/results/)."""

import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "docs"))
import engines  # noqa: E402
import results  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="6" time="12.5"
 timestamp="2026-11-26T10:00:00.000000" hostname="h">
<properties><property name="torch" value="2.13.0+cpu"/><property name="python" value="3.11.7"/></properties>
<testcase classname="test_engines" name="test_zero3[cpu]" time="1"/>
<testcase classname="test_engines" name="test_zero3[npu]" time="1"><failure message="boom">x</failure></testcase>
<testcase classname="test_engines" name="test_zero3_offload[cpu-bf16]" time="1"/>
<testcase classname="test_engines" name="test_zero3_offload[npu-bf16]" time="1"/>
<testcase classname="test_engines" name="test_zero3_offload[sdaa-bf16]" time="0"><skipped message="no"/></testcase>
<testcase classname="test_engines" name="test_zero3_offloaded[gcu]" time="1"/>
</testsuite></testsuites>
"""
ROW = engines.Engine("ZeRO-3", ("test_zero3", "test_zero3_offload"), {"npu": "DeepSpeed's NPU accelerator", "*": "ours"})


def test_a_cell_is_what_transfer_does_and_the_outcome_of_the_rows_tests_for_that_target(tmp_path, monkeypatch):
    (tmp_path / "tests-torch-2.13.0.xml").write_text(JUNIT)
    monkeypatch.setattr(engines, "ENGINES", [ROW])
    lines = engines.table(results.runs(str(tmp_path))).splitlines()
    assert lines[0] == "| engine | cpu | npu | sdaa | gcu |"
    assert lines[2] == ("| ZeRO-3 | passes (2 tests)<br>ours | **fails**: `test_zero3[npu]`<br>DeepSpeed's NPU accelerator | "
                        "0 of 1 pass, the others skipped<br>ours | not run<br>ours |")  # test_zero3_offloaded: another test
    assert "torch 2.13.0 / Python 3.11.7" in lines[-1]


def test_a_test_id_counts_for_the_target_among_its_parameters():
    assert engines.targets_of("test_x[gcu-torchrun]", "test_x") == ["gcu"]
    assert engines.targets_of("test_x[npu]", "test_x") == ["npu"]
    assert engines.targets_of("test_xy[npu]", "test_x") == []
    assert engines.targets_of("test_x", "test_x") == []


def test_the_engines_page_is_what_the_recorded_runs_say():
    assert engines.check() == [], "run `nox -s results` (docs/engines.md was edited or docs/results changed)"


def test_the_table_reads_the_newest_run_of_the_full_suite_or_the_engines_session(tmp_path, monkeypatch):
    """`nox -s engines` records the engines' tests without a full run: a newer engines run wins over an older
    full run, and a full run of the same date wins over it."""
    (tmp_path / "tests-torch-2.13.0.xml").write_text(JUNIT)
    (tmp_path / "engines-torch-2.13.0.xml").write_text(JUNIT.replace("2026-11-26T", "2026-11-27T").replace(
        '<testcase classname="test_engines" name="test_zero3[npu]" time="1"><failure message="boom">x</failure>'
        '</testcase>', '<testcase classname="test_engines" name="test_zero3[npu]" time="1"/>'))
    (tmp_path / "compat-torch-2.14.1.xml").write_text(JUNIT.replace("2026-11-26T", "2026-11-28T"))
    monkeypatch.setattr(engines, "ENGINES", [ROW])
    lines = engines.table(results.runs(str(tmp_path))).splitlines()
    assert lines[2].split(" | ")[2].startswith("passes (2 tests)"), lines[2]  # the engines run, not compat's
    assert "the engines' tests" in lines[-1] and "`nox -s engines`, 2026-11-27" in lines[-1], lines[-1]
    (tmp_path / "engines-torch-2.13.0.xml").write_text(JUNIT.replace(
        '<testcase classname="test_engines" name="test_zero3[npu]" time="1"><failure message="boom">x</failure>'
        '</testcase>', '<testcase classname="test_engines" name="test_zero3[npu]" time="1"/>'))
    lines = engines.table(results.runs(str(tmp_path))).splitlines()
    assert "the full suite" in lines[-1] and "**fails**" in lines[2], lines  # same date: the full suite wins

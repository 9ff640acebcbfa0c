"""transfer.settings: every TRANSFER_* variable declared once, read there, misspellings named."""

import logging
import os
import re

import pytest

import transfer
from transfer import settings
from transfer.errors import TransferError

PACKAGE = os.path.dirname(os.path.abspath(transfer.__file__))  # the installed package (nox: the wheel's)
#: Where a TRANSFER_* variable is looked up without transfer.settings: the start-up gate, whose one
#: raw lookup of TRANSFER_DEVICE runs at every `import torch` / interpreter start (settings.py docstring),
#: and install's export of the chosen target to child processes (a write and its undo).
RAW_READERS = {"__init__.py", "_autoload.py", os.path.join("bootstrap", "sitecustomize.py")}
#: Names that look like settings and are not: a module name transfer watches for.
NOT_SETTINGS = {"TRANSFER_TO_NPU"}


def _sources():
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as fh:
                    yield os.path.relpath(path, PACKAGE), fh.read()


def test_every_transfer_variable_the_package_names_is_a_declared_setting():
    assert "settings.py" in dict(_sources())
    named = {m for path, text in _sources() if path != "settings.py"  # its docstring shows a misspelling
             for m in re.findall(r"(?<![_A-Z])TRANSFER_[A-Z0-9_]*[A-Z0-9]", text)}
    assert named - NOT_SETTINGS - set(settings.NAMES_OF_SETTINGS) == set()
    assert len(settings.NAMES_OF_SETTINGS) == len(set(settings.NAMES_OF_SETTINGS))


def test_only_the_start_up_gate_reads_a_setting_without_the_settings_module():
    raw = re.compile(r"(environ\.get\(|environ\[|getenv\()\s*[\"']TRANSFER_")
    readers = {path for path, text in _sources() if raw.search(text)}
    # runner.py and plan.py write the variables for the processes they start (--log, --plan)
    assert readers - RAW_READERS - {"settings.py", "runner.py", "plan.py"} == set()
    for path in ("runner.py", "plan.py"):
        text = dict(_sources())[path]
        assert not re.search(r"environ\.get\(\s*[\"']TRANSFER_", text), path


@pytest.mark.parametrize("name,value,guess", [
    ("TRANSFER_STRICT", "ture", "'true'"), ("TRANSFER_QUIET", "yse", "'yes'"),
    ("TRANSFER_PLAN", "nup", "'npu'"), ("TRANSFER_CPU_AMP_DTYPE", "bfloat61", "'bfloat16'"),
    ("TRANSFER_DEVICE", "cpuu", "'cpu'"),
])
def test_a_misspelled_value_names_the_closest_choice(install_cpu, monkeypatch, tmp_path, name, value, guess):
    with pytest.raises(TransferError, match=f"Did you mean {guess}"):
        if name == "TRANSFER_DEVICE":  # install_cpu names the target itself
            monkeypatch.setenv(name, value)
            transfer.install()
        else:
            install_cpu(**{name: value, "TRANSFER_LOG": str(tmp_path) if name == "TRANSFER_PLAN" else None})
    assert transfer.status()["active"] is False


def test_a_misspelled_setting_name_is_named_with_the_setting_it_likely_means(install_cpu, caplog):
    caplog.set_level(logging.WARNING, logger="transfer")
    settings._warned_names.discard("TRANSFER_STRCT")
    install_cpu(TRANSFER_STRCT="1", TRANSFER_NOX_FRESH="1")
    warned = [r.getMessage() for r in caplog.records if "is not a transfer setting" in r.getMessage()]
    assert len(warned) == 1 and "TRANSFER_STRCT" in warned[0] and "did you mean TRANSFER_STRICT?" in warned[0]
    assert settings.misspelled_names({"TRANSFER_DEVCE": "cpu", "TRANSFER_DEVICE": "cpu"}) == [
        ("TRANSFER_DEVCE", "TRANSFER_DEVICE")]

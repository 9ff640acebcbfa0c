"""README.md is a front door: short, its tables render, its settings table names every TRANSFER_* variable,
its links lead somewhere, and every command it shows is one that a test or a nox session runs. tests/README.md
names every test file, and only files that exist.

The rest of the documentation is in docs/; its generated tables are checked against their sources by
test_results.py, test_bench_table.py, test_engines_table.py and test_support.py.
"""

import os
import re

import transfer
from transfer import settings
from conftest import ROOT
from test_banner_and_logging import BANNER

with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as _fh:
    README = _fh.read()

#: Each command README shows (by its start) -> where it is run: (file, strings that file must hold).
RUNNERS = {
    "pip install .": [("noxfile.py", ['def build_wheel(', '"pip", "wheel"', "def quickstart(", "DISTRIBUTION"]),
                      ("tests/test_packaging.py", ['"pip", "wheel"', "def test_pip_install_leaves_the_users_torch"])],
    "TRANSFER_DEVICE=cpu python examples/train_cuda.py": [
        ("tests/test_ways_in.py", ["def test_environment_variable_alone(", 'TRANSFER_DEVICE="cpu"', '"train_cuda.py"']),
        ("noxfile.py", ['"examples", "train_cuda.py"', '"TRANSFER_DEVICE": "cpu"'])],
    "transfer port examples --device npu --out": [
        ("noxfile.py", ['"port", os.path.join(ROOT, "examples"), "--device", "npu"', '"--out"'])],
    "pip install nox": [(".ci/run", ['pip install "nox'])],
    "nox -s fast": [("noxfile.py", ["def fast(", 'FAST = ("-m", "not slow")'])],
    "nox": [("noxfile.py", ['nox.options.sessions = ["tests", "nvidia_env", "compat", "standins", "quickstart", "newest"]']),
            (".ci/run", ["nox -s tests", "nox -s compat", "nox -s standins", "nox -s quickstart", "nox -s newest"])],
}
#: Written with its own check of the module map (it names every module of transfer/).
CHECKED_ELSEWHERE = {"docs/architecture.md"}


def section(title):
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def tables(text):
    """Every run of lines starting with '|' (a Markdown table, or what was meant as one)."""
    found, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append(current)
            current = []
    return found


def cells(row):
    row = re.sub(r"`[^`]*`", "code", row)  # a code span may hold a '|'
    return len(re.findall(r"(?<!\\)\|", row)) - 1


def commands():
    """The commands of README's bash blocks (comments dropped) and the `$ ` lines of its text blocks."""
    found = []
    for kind, block in re.findall(r"```(bash|text)\n(.*?)```", README, re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if kind == "text":
                line = line[2:] if line.startswith("$ ") else ""
            if line:
                found.append(line)
    return found


def test_the_readme_is_a_front_door():
    assert len(README.splitlines()) <= 180, "README.md is the front door: move the detail to docs/"
    for title in ("Quick start (no accelerator needed)", "Three ways in", "Settings", "Run the tests", "Read more"):
        assert f"\n## {title}\n" in README, title
    assert "docs/architecture.md" in section("Read more")


def test_every_table_renders():
    """A table is a header, a separator and rows of the header's width: rows after a paragraph, or a row
    with a cell too many, render as text."""
    for table in tables(README):
        assert len(table) >= 3 and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", table[1]), table[:2]
        width = cells(table[0])
        assert [row for row in table if cells(row) != width] == [], table[0]


def test_the_settings_table_names_every_variable():
    """Every TRANSFER_* variable transfer reads is a row of the settings table, and every row is one."""
    package = os.path.dirname(os.path.abspath(transfer.__file__))
    read, constants = set(), set()
    for folder, _, files in os.walk(package):
        for name in files:
            if name.endswith((".py", ".c", ".pth")):
                text = open(os.path.join(folder, name), encoding="utf-8").read()
                read |= set(re.findall(r"(?<![A-Za-z0-9_])TRANSFER_[A-Z][A-Z0-9_]*", text))
                constants |= set(re.findall(r"^(TRANSFER_[A-Z0-9_]+) = ", text, re.M))  # names, not variables
    rows = [line for table in tables(section("Settings")) for line in table[2:]]
    listed = [re.match(r"\| `(TRANSFER_[A-Z0-9_]+)=", row).group(1) for row in rows]
    assert sorted(listed) == sorted(settings.NAMES_OF_SETTINGS)
    # a name in the sources is a setting, a constant, or a misspelling shown as an example of the warning
    examples = {name for name, _ in settings.misspelled_names({n: "" for n in read})}
    assert sorted(read - constants - examples) == sorted(settings.NAMES_OF_SETTINGS)


def test_every_link_leads_to_a_file():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" in target or target in CHECKED_ELSEWHERE:
            continue
        assert os.path.exists(os.path.join(ROOT, target)), target


def test_every_command_is_run_by_a_test_or_a_session():
    shown = commands()
    assert len(shown) >= 6, shown
    for command in shown:
        start = max((key for key in RUNNERS if command == key or command.startswith(key + " ")), key=len, default=None)
        assert start is not None, f"README shows `{command}`: name the test that runs it in RUNNERS"
        for path, evidence in RUNNERS[start]:
            text = open(os.path.join(ROOT, path), encoding="utf-8").read()
            assert [e for e in evidence if e not in text] == [], (command, path)


def test_the_quick_start_prints_what_the_tests_see():
    printed = README.split("```text\n", 1)[1].split("```", 1)[0]
    assert BANNER in printed.splitlines()  # the banner test_banner_and_logging.py asserts
    assert "outputs identical: True" in printed and "epoch 0: loss" in printed  # what test_ways_in.py asserts


def test_the_tests_readme_names_every_test_file():
    tests = os.path.join(ROOT, "tests")
    with open(os.path.join(tests, "README.md"), encoding="utf-8") as fh:
        named = set(re.findall(r"`((?:frameworks/)?test_[a-z0-9_]+\.py)`", fh.read()))
    present = {name for name in os.listdir(tests) if re.fullmatch(r"test_[a-z0-9_]+\.py", name)}
    present |= {"frameworks/" + name for name in os.listdir(os.path.join(tests, "frameworks"))
                if re.fullmatch(r"test_[a-z0-9_]+\.py", name)}
    assert sorted(present - named) == [], "say in tests/README.md which module these cover"
    assert sorted(named - present) == [], "tests/README.md names test files that do not exist"

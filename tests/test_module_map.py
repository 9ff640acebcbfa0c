"""docs/architecture.md's module map names every module of the installed package, as its docstring says."""

import os
import sys

import transfer

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "docs"))
import architecture  # noqa: E402  (docs/architecture.py: the map's generator)

PACKAGE = os.path.dirname(os.path.abspath(transfer.__file__))


def test_the_module_map_is_what_the_modules_say():
    assert architecture.current() == architecture.render(PACKAGE), (
        "docs/architecture.md's module map is stale: run python docs/architecture.py --write")


def test_every_module_is_a_row_and_every_folder_of_modules_a_package():
    rows = [path for path, _ in architecture.modules(PACKAGE)]
    for folder, dirs, files in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        relative = os.path.relpath(folder, PACKAGE).replace(os.sep, "/")
        sources = [n for n in files if n.endswith(architecture.SOURCES)]
        if relative != "." and any(n.endswith(".py") for n in sources) and relative != "bootstrap":
            assert "__init__.py" in files, f"transfer/{relative} has modules but no __init__.py: the wheel leaves it out"
        for name in sources:
            path = name if relative == "." else f"{relative}/{name}"
            assert path in rows or any(r.endswith("/") and path.startswith(r) for r in rows), path
    assert all(what for _, what in architecture.modules(PACKAGE)), "a module without a docstring"

"""``python -m transfer``: both of transfer's commands under one name.

* ``python -m transfer [--device X] script.py args`` (or ``-m module args``) runs
  a CUDA script on a target, as ``transfer-run script.py`` does (transfer.runner);
* ``python -m transfer scan|port|docs ...`` and ``--version`` are the ``transfer``
  command (transfer.cli), unless a file of that name is the script to run.
"""

import os
import sys

#: The first arguments that make this the ``transfer`` command.
TOOL_WORDS = ("scan", "port", "docs", "--version", "-V")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in TOOL_WORDS and not os.path.isfile(argv[0]):
        from .cli import main as tool

        return tool(argv)
    from .runner import run_python

    return run_python(argv)


if __name__ == "__main__":
    sys.exit(main())

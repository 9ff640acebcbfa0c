"""``python -m transfer [--device X] script.py args``: see transfer.runner."""

import sys

from .runner import run_python

if __name__ == "__main__":
    sys.exit(run_python())

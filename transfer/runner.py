"""``transfer-run [--device X] CMD ...`` and ``python -m transfer script.py``.

``transfer-run train.py args`` (a ``.py`` file that exists, no ``python``) runs
it with the interpreter transfer-run runs on, as ``python -m transfer train.py``
does.

transfer-run puts `transfer/bootstrap` (holding a sitecustomize.py) first on
PYTHONPATH, sets TRANSFER_DEVICE and execs CMD, so every Python process the
command starts (torchrun's workers, mp.spawn children) activates transfer when
it imports torch, with no change to the script. The bootstrap chains to the
user's own sitecustomize.

Only the bootstrap directory is added: entries on PYTHONPATH come before the
standard library in every process of the job, so adding the directory that
holds transfer (site-packages) would put every installed package ahead of the
standard library (a `typing` or `enum` backport there would shadow Python's
own). The interpreters of the job import transfer as they import anything
else; one that cannot says so on stderr (the bootstrap).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, MutableMapping, Optional

from . import settings
from .profiles import CHOICES, PROFILES
from .selection import FROM_FLAG_ENV

BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap")


def prepare_environment(env: MutableMapping[str, str], device: Optional[str]) -> None:
    """Set TRANSFER_DEVICE and PYTHONPATH in `env` for processes started from it."""
    from .selection import requested

    env["TRANSFER_DEVICE"] = requested(device or settings.value("TRANSFER_DEVICE", env),
                                       source="--device" if device else None)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOTSTRAP_DIR]
    env["PYTHONPATH"] = os.pathsep.join([BOOTSTRAP_DIR, *parts])


def _parser(prog: str, command_help: str) -> argparse.ArgumentParser:
    also = ("" if prog != "python -m transfer" else
            "python -m transfer scan|port|docs|--version is the `transfer` command (offline tools).")
    parser = argparse.ArgumentParser(prog=prog, description="Run a CUDA PyTorch program on the target chosen "
                                     f"by --device or TRANSFER_DEVICE ({', '.join(CHOICES)}). A .py file "
                                     "as the command runs with this Python.", epilog=also or None)
    parser.add_argument("--device", "-d", help="target profile (default: TRANSFER_DEVICE, else auto)")
    parser.add_argument("--log", metavar="DIR", help="log every CUDA-facing call site, one JSON-lines file per "
                        "rank, in DIR (sets TRANSFER_LOG)")
    parser.add_argument("--plan", metavar="TARGET", help="rehearse a port: run the job where it runs (real CUDA "
                        f"included) and log each CUDA-facing call site with what TARGET ({', '.join(PROFILES)}) will do "
                        "with it, from the support table (sets TRANSFER_PLAN; needs --log or TRANSFER_LOG)")
    parser.add_argument("--compare", metavar="MODE", help="accuracy mode: nonfinite, shadow, record:FILE or "
                        "against:FILE, with :every=N,steps=A-B,... (sets TRANSFER_COMPARE; docs/accuracy.md)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help=command_help)
    return parser


def _parse(prog: str, command_help: str, usage: str, argv: Optional[List[str]]):
    """Parsed arguments with the environment prepared, or None after printing why not."""
    from .errors import TransferError

    args = _parser(prog, command_help).parse_args(argv)
    if not args.command:
        print(f"{prog}: no command given; usage: {usage}", file=sys.stderr)
        return None
    if args.log:
        os.environ["TRANSFER_LOG"] = os.path.abspath(args.log)
    if args.compare:
        from .compare.options import parse

        try:
            parse(args.compare)
        except TransferError as exc:
            print(f"{prog}: --compare: {exc}", file=sys.stderr)
            return None
        os.environ["TRANSFER_COMPARE"] = args.compare
    if args.plan:
        from .profiles import PROFILES

        if args.plan.strip().lower() not in PROFILES:
            print(f"{prog}: --plan {args.plan}: not a target;{settings.did_you_mean(args.plan.strip().lower(), PROFILES)} "
                  f"choose one of {', '.join(PROFILES)}", file=sys.stderr)
            return None
        if not settings.log_directory():
            print(f"{prog}: --plan writes its findings to the call-site log: add --log DIR", file=sys.stderr)
            return None
        os.environ["TRANSFER_PLAN"] = args.plan.strip().lower()
    try:
        prepare_environment(os.environ, args.device)
    except TransferError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
    if args.device:  # the job's messages name the flag the user typed (selection.asking_for)
        os.environ[FROM_FLAG_ENV] = "1"
    else:
        os.environ.pop(FROM_FLAG_ENV, None)
    return args


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the transfer-run console script."""
    args = _parse("transfer-run", "the command to run, e.g. torchrun --nproc_per_node=8 train.py",
                  "transfer-run [--device X] torchrun --nproc_per_node=2 train.py", argv)
    if args is None:
        return 2
    command = args.command
    if _is_python_script(command[0]):  # `transfer-run train.py`: run it as `python -m transfer train.py` does
        command = [sys.executable, *command]
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        hint = ""
        if command[0].endswith(".py"):
            hint = f" (to run a Python script: transfer-run [--device X] python {command[0]} ...)"
        print(f"transfer-run: cannot run {command[0]!r}: {exc.strerror or exc}{hint}", file=sys.stderr)
        return 127
    return 0  # not reached


def _is_python_script(name: str) -> bool:
    """A ``.py`` file that exists: transfer-run runs it with this interpreter (no `python` needed)."""
    return name.endswith(".py") and os.path.isfile(name)


def run_python(argv: Optional[List[str]] = None) -> int:
    """``python -m transfer [--device X] script.py args`` or ``... -m module args``."""
    import runpy

    args = _parse("python -m transfer", "script.py [args], or -m module [args]",
                  "python -m transfer [--device X] script.py [args...] | -m module [args...]", argv)
    if args is None:
        return 2
    from ._autoload import arm

    arm()
    command = args.command
    if command[0] == "-m" and len(command) > 1:
        sys.argv = command[1:]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = command
        sys.path.insert(0, os.path.dirname(os.path.abspath(command[0])))
        runpy.run_path(command[0], run_name="__main__")
    return 0

"""The ``transfer`` console script: ``scan``, ``port``, ``docs`` (maintainers), ``--version``.

Offline tools; none of them imports torch or the patches. Exit codes: scan 0
(with --strict: 1 when anything is unsupported on the chosen profile(s)), port
0 (1 when a file failed to parse), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .profiles import CHOICES, PROFILES


#: What `transfer --help` says after the subcommands: how to run a script, the variables, the log.
RUNNING = """\
to run an unmodified CUDA script on a target (not a subcommand of this tool):
  transfer-run [--device TARGET] python train.py ...   (or: transfer-run train.py ...)
  transfer-run --device npu torchrun --nproc_per_node=8 train.py
  TRANSFER_DEVICE=npu python train.py          (no launcher: the variable alone)
  python -m transfer [--device X] train.py      (or add `from transfer import auto as _` to the script)
targets (TARGET, X, TRANSFER_DEVICE): {targets}
variables: TRANSFER_DEVICE (the target), TRANSFER_LOG=DIR (log every CUDA-facing call site; transfer-run --log DIR),
  TRANSFER_REPORT=FILE (what was translated, as JSON at exit), TRANSFER_QUIET=1, TRANSFER_STRICT=1,
  TRANSFER_DISABLE=NAME,..., TRANSFER_COMPARE=nonfinite|shadow|record:F|against:F (where the run stops computing
  what CUDA computes: docs/accuracy.md); docs/usage.md lists them all.""".format(targets=", ".join(CHOICES))


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="transfer", description="Offline tools for CUDA PyTorch code: scan it "
                                     "for what each target does with its CUDA calls, or port it to a vendor's "
                                     "own spellings.", epilog=RUNNING,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", "-V", action="version", version=f"%(prog)s {__version__} (cuda-transfer)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{scan,port,docs}")
    scan = sub.add_parser("scan", help="report every CUDA-facing use and what each target does with it")
    scan.add_argument("paths", nargs="+", metavar="PATH", help="Python files or directories")
    scan.add_argument("--device", "-d", choices=list(PROFILES), help="one target (default: every target side by side)")
    scan.add_argument("--format", "-f", choices=("text", "json", "csv"), default="text")
    scan.add_argument("--strict", action="store_true", help="exit 1 when anything is unsupported")
    scan.add_argument("--torch", metavar="VERSION", help="with --device: judge the torch APIs the target runs on "
                      "the CPU for this torch (and its plug-in) version (default: the installed torch's, else "
                      "the newest known)")
    _workers(scan)
    port = sub.add_parser(
        "port", help="rewrite CUDA spellings to the vendor's own",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="safe (always): torch.cuda.X -> torch.<dev>.X where the vendor has X; torch.cuda.amp autocast/GradScaler\n"
               "  -> torch.autocast/torch.amp.GradScaler(\"<dev>\"); .cuda() / .cuda(N) -> .to(\"<dev>[:N]\"); .is_cuda;\n"
               "  device strings where a device is expected; backend \"nccl\"; comparisons of device variables and\n"
               "  of x.device.type / get_backend() with \"cuda\" / \"nccl\"; try/except ImportError fallbacks of CUDA-only\n"
               "  packages; the vendor import; set_device before init_process_group where the backend needs it (tccl).\n"
               "unsafe (--unsafe): .cuda(expr) -> .to(f\"<dev>:{expr}\") (.cuda(device) -> .to(device)); device/backend\n"
               "  strings anywhere; == \"cuda\" / == \"nccl\" -> in (\"cuda\", \"<dev>\").\n"
               "writes (not with --diff): change_list.csv, unsupported_api.csv (left for a person), port.log,\n"
               "  and with --main run_distributed_<device>.sh; exit 1 when a file failed to parse, 2 on bad usage.")
    port.add_argument("paths", nargs="+", metavar="SRC", help="Python files or directories")
    port.add_argument("--device", "-d", required=True, choices=[p for p in PROFILES if not PROFILES[p].is_cpu])
    where = port.add_mutually_exclusive_group()
    where.add_argument("--out", "-o", help="write the ported tree here (default: ./ported-<device>)")
    where.add_argument("--diff", action="store_true", help="print a unified diff (apply with patch -p1), write nothing")
    where.add_argument("--in-place", action="store_true", help="rewrite the files themselves")
    port.add_argument("--unsafe", action="store_true", help="also make the rewrites that may change behaviour")
    _workers(port)
    port.add_argument("--main", "-m", metavar="FILE", help="the entry script: also write run_distributed_<device>.sh "
                      "that starts it on every device (torchrun, or python for spawn/single-process scripts)")
    docs = sub.add_parser("docs", help="(maintainers) regenerate docs/support-matrix.md in a transfer checkout",
                          description="For maintainers of transfer: write docs/support-matrix.md of a transfer "
                          "checkout from the support table (run it from the checkout's root), or another file "
                          "with --output.")
    docs.add_argument("--output", "-o", metavar="FILE", help="the file to write (default: docs/support-matrix.md "
                      "of the transfer checkout in the current directory; refused elsewhere)")
    docs.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file is not what the "
                      "table renders")
    return parser


def _workers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", "-j", type=int, default=0, metavar="N",
                        help="worker processes, each handling whole files (default: one per core)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar on stderr (it shows on a terminal only, after half a second)")


#: First words that mean "run this", which is transfer-run's job, not a subcommand of transfer.
_RUN_WORDS = ("run", "python", "python3", "torchrun", "exec")


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and (argv[0] in _RUN_WORDS or argv[0].endswith(".py")):
        rest = " ".join(argv[1:] if argv[0] in ("run", "exec") else argv)
        print(f"transfer: '{argv[0]}' is not a subcommand (scan, port, docs). To run a CUDA script on a target: "
              f"transfer-run [--device X] {rest or 'python train.py'}  (or python -m transfer [--device X] "
              f"script.py)", file=sys.stderr)
        return 2
    args = _parser().parse_args(argv)
    try:
        if args.command == "scan":
            return _scan(args)
        if args.command == "port":
            return _port(args)
    except FileNotFoundError as exc:
        print(f"transfer {args.command}: {exc}", file=sys.stderr)
        return 2
    from .migrate import docs

    output = args.output
    if output is None:
        if not _is_checkout(os.getcwd()):
            print("transfer docs: the current directory is not a transfer checkout (no transfer/support.py, "
                  "docs/ here). It regenerates docs/support-matrix.md for transfer's maintainers: run it from "
                  "the checkout's root, or give --output FILE.", file=sys.stderr)
            return 2
        output = docs.DEFAULT_PATH
    return docs.main(["--output", output] + (["--check"] if args.check else []))


def _is_checkout(folder: str) -> bool:
    """`folder` is the root of a transfer source checkout (where docs/support-matrix.md belongs)."""
    return (os.path.isfile(os.path.join(folder, "transfer", "support.py"))
            and os.path.isdir(os.path.join(folder, "docs")))


def _scan(args) -> int:
    from .migrate import scan_files

    result = scan_files.run(args.paths, [args.device] if args.device else list(PROFILES), jobs=args.jobs,
                            progress=not args.no_progress, torch_version=args.torch)
    sys.stdout.write(scan_files.FORMATS[args.format](result))
    if args.format != "text":
        print(scan_files.summary(result), file=sys.stderr)
    return 1 if args.strict and result.unsupported() else 0


def _port(args) -> int:
    from .migrate import port_files

    out = None if (args.diff or args.in_place) else (args.out or f"ported-{args.device}")
    try:
        outcome = port_files.run(args.paths, args.device, out=out, diff=sys.stdout if args.diff else None,
                           in_place=args.in_place, unsafe=args.unsafe, errors=sys.stderr, main=args.main,
                           jobs=args.jobs, progress=not args.no_progress)
    except ValueError as exc:
        print(f"transfer port: {exc}", file=sys.stderr)
        return 2
    where = "" if args.diff else f"; reports: {out or '.'}/change_list.csv, unsupported_api.csv, port.log"
    if outcome.launcher:
        where += f"; launch: {outcome.launcher}"
    print(outcome.summary() + where, file=sys.stderr)
    for line in outcome.left():
        print(f"  {line}", file=sys.stderr)
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(main())

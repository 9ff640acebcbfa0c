"""docs/support-matrix.md, rendered from the support table.

``python -m transfer.migrate.docs`` (or ``transfer docs``) writes it;
``--check`` exits 1 when the file on disk is stale (CI and
tests/test_migrate_docs.py run that).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .. import support
from ..profiles import PROFILES

DEFAULT_PATH = os.path.join("docs", "support-matrix.md")  # from the checkout's root


def _cell(entry: support.Support) -> str:
    text = entry.cls + (f" → `{entry.to}`" if entry.to else "")
    return text.replace("|", "\\|")


def render() -> str:
    profiles = list(PROFILES)
    lines = [
        "# Support matrix",
        "",
        "<!-- Generated from transfer/support.py by `python -m transfer.migrate.docs`; do not edit. -->",
        "",
        "What `transfer` does with each CUDA-facing API, per target: **translated** (to what), **no-op**, "
        "**placeholder** (a fixed value), or **unsupported** (`UnsupportedCudaAPI`, or a test that stays False). "
        "`transfer scan` reports the same classes for your code; the runtime log (`TRANSFER_LOG`) records them per call site.",
        "",
        "| API | " + " | ".join(f"{p} ({PROFILES[p].vendor})" for p in profiles) + " |",
        "|---|" + "---|" * len(profiles),
    ]
    reasons = []
    for api, row in support.table(profiles):
        lines.append(f"| `{api}` | " + " | ".join(_cell(row[p]) for p in profiles) + " |")
        distinct = []
        for p in profiles:
            if row[p].reason and row[p].reason not in [r for _, r in distinct]:
                distinct.append((p, row[p].reason))
        if distinct:
            why = distinct[0][1] if len(distinct) == 1 else "; ".join(f"{p}: {r}" for p, r in distinct)
            reasons.append(f"- `{api}`: {why}")
    lines += ["", "## Why", ""] + [r.replace("|", "\\|") for r in reasons]
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="transfer docs", description="Write docs/support-matrix.md from the support table.")
    parser.add_argument("--output", "-o", default=DEFAULT_PATH, help=f"where to write it (default: {DEFAULT_PATH})")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from the table, write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        try:
            with open(args.output, encoding="utf-8") as fh:
                current = fh.read()
        except FileNotFoundError:
            current = None
        if current != text:
            print(f"{args.output} is stale: regenerate it with `python -m transfer.migrate.docs`", file=sys.stderr)
            return 1
        return 0
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

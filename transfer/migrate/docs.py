"""docs/support-matrix.md, rendered from the support table, and README.md's table of targets.

``python -m transfer.migrate.docs`` (or ``transfer docs``) writes both (README.md's table between its
TARGETS markers, when README.md is beside the docs/ folder written to); ``--check`` exits 1 when either
on disk is stale (CI and tests/test_migrate.py run that). A new target is a profile: both follow from it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .. import envvars, support
from ..profiles import PROFILES
from . import rewrites

DEFAULT_PATH = os.path.join("docs", "support-matrix.md")  # from the checkout's root
README_BEGIN = "<!-- TARGETS: generated from transfer/profiles.py by `python -m transfer.migrate.docs`; do not edit -->"
README_END = "<!-- /TARGETS -->"


def targets_table() -> List[str]:
    """One row per target (transfer/profiles.py): what TRANSFER_DEVICE says, the plug-in, the collectives and the
    visible-devices variable that stand for NCCL's and CUDA's."""
    lines = ["| target | vendor | plug-in | collectives (for `nccl`) | visible devices (for `CUDA_VISIBLE_DEVICES`) |",
             "|---|---|---|---|---|"]
    for p in PROFILES.values():
        plugin = p.package or ("none" if p.is_cpu else f"torch itself (`torch.{p.device_type}`)")
        lines.append(f"| `{p.name}` | {p.vendor} | {plugin} | {p.backend} | {p.visible_devices_env or '-'} |")
    return lines


def readme(text: str) -> str:
    """README.md's text with its table of targets rendered anew (unchanged where it has no markers)."""
    start, end = text.find(README_BEGIN), text.find(README_END)
    if start < 0 or end < start:
        return text
    return text[:start + len(README_BEGIN)] + "\n" + "\n".join(targets_table()) + "\n" + text[end:]


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
    targets = ["", "## Targets", ""] + targets_table()
    return "\n".join(lines + targets + _native_rewrites() + _environment(profiles)) + "\n"


def _native_rewrites() -> List[str]:
    """What `transfer port` writes instead of a third-party call (rewrites.NATIVE_REWRITES), and why not elsewhere."""
    lines = [
        "",
        "## Torch-native rewrites (`transfer port`)",
        "",
        "Where the package is absent, transfer serves these calls at run time (above). `transfer port` also "
        "rewrites them to plain torch where the arguments in the source show that the result is the same: **safe** "
        "(written by default) or **unsafe** (written only with `--unsafe`, for the reason given). Any other argument "
        "value, or a file that also uses `apex.amp`, leaves the call named in `unsupported_api.csv` with why.",
        "",
        "| call | becomes | computes the same when | kind |",
        "|---|---|---|---|",
    ]
    for api, rewrite in rewrites.NATIVE_REWRITES.items():
        kind = f"unsafe: {rewrite.unsafe}" if rewrite.unsafe else "safe"
        lines.append(f"| `{api}` | {rewrite.to} | {rewrite.when} | {kind} |".replace("\n", " "))
    lines += ["", "Not rewritten:", ""]
    lines += [f"- `{api}`: {why}" for api, why in rewrites.NO_NATIVE_REWRITE.items()]
    return lines


def _environment(profiles) -> List[str]:
    """The environment-variable table (transfer/envvars.py and each profile's `env`)."""
    lines = [
        "",
        "## Environment variables",
        "",
        "Every `NCCL_*`, `TORCH_NCCL_*` and `CUDA_*` variable is **informational** (metadata nothing reads at run "
        "time: never a warning, never an error under `TRANSFER_STRICT=1`), **not needed** (configures a part of CUDA "
        "the target does not have), **translated** to the target's variable (→, with the value converted where the "
        "unit or syntax differs), **built in** (the target behaves so without a variable) or **unsupported** (one "
        "warning names them; an error under `TRANSFER_STRICT=1`). Variables not listed: other `CUDA_*` names are not "
        "read by the CUDA runtime (informational: `CUDA_PKG_VERSION`, ...), other `NCCL_*` and `TORCH_NCCL_*` names "
        "are unsupported. `NVIDIA_*` and `TORCH_CUDA_ARCH_LIST` (build-time) are never looked at.",
        "",
        "When: `CUDA_VISIBLE_DEVICES` and `CUDA_LAUNCH_BLOCKING` are translated before the vendor plug-in is imported "
        "(at install: vendor runtimes read them when they start); collective variables at install and again just "
        "before every process group is created, so one set after `import torch` still counts. A variable set or "
        "changed after its moment (the plug-in's import; the first process group) gets a warning saying it came "
        "too late. A variable you set for the target yourself (`HCCL_SOCKET_IFNAME`, ...) wins.",
        "",
        "| variable | " + " | ".join(f"{p} ({PROFILES[p].backend})" for p in profiles) + " |",
        "|---|" + "---|" * len(profiles),
    ]
    reasons = []
    for name, row in envvars.rows({p: PROFILES[p] for p in profiles}):
        cells = []
        for p in profiles:
            verdict = row[p]
            cell = f"→ `{verdict.target}`" if verdict.target else verdict.cls
            rename = PROFILES[p].env.get(name)
            if rename is not None and rename.scale == 1 / 2 ** 20:
                cell += " (bytes → MB)"
            elif rename is not None and rename.scale != 1.0:
                cell += f" (×{rename.scale:g})"
            cells.append(cell)
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
        distinct = []
        for p in profiles:
            reason = row[p].reason
            if reason and not reason.startswith("no known equivalent") and reason not in [r for _, r in distinct]:
                distinct.append((p, reason))
        if distinct:
            why = distinct[0][1] if len(distinct) == 1 else "; ".join(f"{p}: {r}" for p, r in distinct)
            reasons.append(f"- `{name}`: {why}")
    return lines + ["", "### Why", ""] + reasons


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="transfer docs", description="Write docs/support-matrix.md from the support table.")
    parser.add_argument("--output", "-o", default=DEFAULT_PATH, help=f"where to write it (default: {DEFAULT_PATH})")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from the table, write nothing")
    args = parser.parse_args(argv)
    outputs = {args.output: render()}
    readme_path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.output))), "README.md")
    if os.path.basename(os.path.dirname(os.path.abspath(args.output))) == "docs" and os.path.exists(readme_path):
        with open(readme_path, encoding="utf-8") as fh:
            outputs[readme_path] = readme(fh.read())
    stale = 0
    for path, text in outputs.items():
        try:
            with open(path, encoding="utf-8") as fh:
                current = fh.read()
        except FileNotFoundError:
            current = None
        if current == text:
            continue
        if args.check:
            print(f"{path} is stale: regenerate it with `python -m transfer.migrate.docs`", file=sys.stderr)
            stale = 1
            continue
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"wrote {path}")
    return stale


if __name__ == "__main__":
    sys.exit(main())

"""Table, JSON and chart of a benchmark run."""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List

from . import _common as C


def _num(value: Any, fmt: str = "{:.2f}") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value)


def _mark(meets: Any) -> str:
    return {True: "ok", False: "MISS", None: ""}[meets if meets in (True, False) else None]


def _ci(rec: Dict[str, Any]) -> str:
    ci = rec.get("ratio_ci")
    return f"{ci[0]:.3f}-{ci[1]:.3f}" if ci else ""


def _training_mark(rec: Dict[str, Any]) -> str:
    """ok / MISS, or 'unresolved' when the median is above target but its 95% interval is not."""
    if rec.get("meets_target") is None and rec.get("ratio_ci"):
        return "unresolved"
    return _mark(rec.get("meets_target"))


def _status_line(name: str, result: Any) -> str:
    status = result.get("status", "?") if isinstance(result, dict) else str(result)
    return f"  {name}: {status}"


def table(results: Dict[str, Any]) -> str:
    lines: List[str] = []
    meta = results.get("meta", {})
    lines.append(f"transfer benchmarks ({'quick' if meta.get('quick') else 'full'}) - torch {meta.get('torch')}, "
                 f"python {meta.get('machine', {}).get('python')}, {meta.get('machine', {}).get('cpus')} CPUs, "
                 f"{meta.get('machine', {}).get('cpu_model', '')}")
    if meta.get("quick"):
        lines.append("  (--quick: few repeats, families run side by side: these numbers only show that the suite "
                     "works; run without --quick for figures)")
    for target, why in meta.get("unavailable", {}).items():
        lines.append(f"  {target}: unavailable: {why}")

    calls = results.get("calls", {}).get("targets", {})
    if calls:
        lines.append("")
        lines.append("1. Per-call cost: ratio = CUDA call under the shim / hand port without it "
                     "(median [q1-q3] over repeats; ns per call, empty-loop cost removed)")
        for target, res in calls.items():
            if not C.is_ok(res):
                lines.append(_status_line(target, res))
                continue
            lines.append(f"  [{target}]  {res.get('repeats')} repeats, {res.get('patches')} patches installed")
            lines.append(f"    {'call':40s} {'hand port':34s} {'native':>9s} {'shim':>9s} {'+ns':>7s} "
                         f"{'ratio':>6s} {'[q1-q3]':>13s} {'target':>6s}")
            for row in res["rows"]:
                lines.append(
                    f"    {row['call'][:40]:40s} {row['native_stmt'][:34]:34s} {_num(row['native'], '{:9.0f}')} "
                    f"{_num(row['shim'], '{:9.0f}')} {_num(row['added'], '{:+7.0f}')} {_num(row['ratio'], '{:6.2f}')} "
                    f"[{_num(row['ratio_q1'])}-{_num(row['ratio_q3'])}] "
                    f"{(_num(row['target'], '{:.1f}x') if row['target'] else 'info'):>6s} {_mark(row['meets_target'])}")

    training = results.get("training", {}).get("targets", {})
    if training:
        lines.append("")
        lines.append("2. Training step: unmodified CUDA script under the shim / hand port (ms per step, "
                     f"target ratio <= {C.TARGET_TRAINING:.2f}; MISS only when the 95% interval of the median lies "
                     "above it, else unresolved); A/A control = hand port / hand port")
        for target, res in training.items():
            if "single" not in res:
                lines.append(_status_line(target, res))
                continue
            for mode in ("single", "ddp"):
                sub = res[mode]
                if not C.is_ok(sub):
                    lines.append(_status_line(f"{target} {mode}", sub))
                    continue
                for kind, rec in sub["models"].items():
                    lines.append(f"  {target:5s} {mode:6s} {kind:4s} native {_num(rec['native'], '{:8.3f}')} "
                                 f"shim {_num(rec['shim'], '{:8.3f}')} ratio {_num(rec['ratio'], '{:.3f}')} "
                                 f"[{_num(rec['ratio_q1'], '{:.3f}')}-{_num(rec['ratio_q3'], '{:.3f}')}] "
                                 f"{_training_mark(rec):10s} A/A control "
                                 f"{_num(rec.get('control_ratio'), '{:.3f}')} "
                                 f"[{_num(rec.get('control_q1'), '{:.3f}')}-{_num(rec.get('control_q3'), '{:.3f}')}]")

    startup = results.get("startup", {})
    if startup:
        lines.append("")
        lines.append("3. Activation and start-up")
        if startup.get("status") != "ok":
            lines.append(_status_line("startup", startup))
        for target, rec in startup.get("import_auto", {}).items():
            if rec.get("status") != "ok":
                lines.append(_status_line(f"import transfer.auto [{target}]", rec))
                continue
            lines.append(f"  import transfer.auto after torch [{target}]: {_num(rec['median_ms'], '{:.1f}')} ms "
                         f"[{_num(rec['q1_ms'], '{:.1f}')}-{_num(rec['q3_ms'], '{:.1f}')}] "
                         f"(target < {C.TARGET_IMPORT_AUTO_MS:.0f} ms) {_mark(rec.get('meets_target'))}")
            if rec.get("no_pyc_median_ms") is not None:
                lines.append(f"      without .pyc files (sources compiled on import): "
                             f"{_num(rec['no_pyc_median_ms'], '{:.1f}')} ms")
            if rec.get("importtime"):
                lines.append("      -X importtime (one run, cumulative/self ms): " + ", ".join(
                    f"{r['module']} {r['cumulative_ms']:.1f}/{r['self_ms']:.1f}" for r in rec["importtime"][:7]))
        for key, title in (("python_pass", "python -c pass"), ("python_import_torch", "python -c 'import torch'"),
                           ("device_backends", "torch._import_device_backends()"),
                           ("autoload_reference", "import torch, AUTOLOAD=1 vs 0 (reference)")):
            block = startup.get(key)
            if not block:
                continue
            if "status" in block:
                lines.append(f"  {title}: {block['status']}")
                continue
            parts = []
            for name, rec in block.items():
                text = f"{name} {_num(rec['median_ms'], '{:.1f}')} ms"
                if "diff_ms" in rec:
                    lo, hi = rec.get("diff_ci95_ms", [None, None])
                    text += (f" ({_num(rec['diff_ms'], '{:+.2f}')} ms, 95% CI {_num(lo, '{:+.1f}')}.."
                             f"{_num(hi, '{:+.1f}')}) {_mark(rec.get('meets_target'))}")
                parts.append(text)
            runs = next(iter(block.values())).get("runs")
            lines.append(f"  {title} [{runs} runs each]: " + "; ".join(parts))

    compiled = results.get("compile", {}).get("targets", {})
    if compiled:
        lines.append("")
        lines.append("4. torch.compile (graph breaks caused by the shim; fullgraph=True)")
        for target, res in compiled.items():
            if not C.is_ok(res):
                lines.append(_status_line(target, res))
                continue
            s = res["summary"]
            lines.append(f"  [{target}] graph breaks shim {s['graph_breaks_shim']} / hand port "
                         f"{s['graph_breaks_native']} -> caused by shim {s['graph_breaks_caused_by_shim']}; "
                         f"fullgraph eager {'compiles' if s['fullgraph_eager_compiles'] else 'FAILS'}, "
                         f"inductor {'compiles' if s['fullgraph_inductor_compiles'] else 'FAILS'} "
                         f"(hand port: {'compiles' if s['native_fullgraph_inductor_compiles'] else 'fails'}) "
                         f"{_mark(s['meets_target']) if s['meets_target'] is not None else '(informational)'}")
            err = res["shim"]["fullgraph_inductor"].get("error")
            if err:
                lines.append(f"      inductor under the shim: {err[:160]}")
            if s["eager_compiled_disagreements"]:
                lines.append("      compiled result differs from eager under the shim for: "
                             + ", ".join(s["eager_compiled_disagreements"]))
            training = res.get("training", {})
            if training.get("status") == "ok":
                lines.append(f"      training: torch.compile runs as {training['runs_as']}; compile "
                             f"{training['compile_seconds']:.1f} s, step compiled / eager "
                             f"{training['step_ratio']:.2f} ({training['compiled_step_ms']:.2f} / "
                             f"{training['eager_step_ms']:.2f} ms), losses differ by at most "
                             f"{training['max_loss_difference']:.1e}")
            elif training:
                lines.append(f"      training: {training['status']}")

    memory = results.get("memory", {}).get("targets", {})
    if memory:
        lines.append("")
        lines.append("5. Peak RSS of a short training run (CNN), shim / hand port")
        for target, rec in memory.items():
            if rec.get("status") != "ok":
                lines.append(_status_line(target, rec))
                continue
            lines.append(f"  [{target}] native {_num(rec['native'], '{:.1f}')} MiB, shim {_num(rec['shim'], '{:.1f}')} "
                         f"MiB ({_num(rec['added'], '{:+.1f}')} MiB), ratio {_num(rec['ratio'], '{:.3f}')} "
                         f"[{_num(rec['ratio_min'], '{:.3f}')}-{_num(rec['ratio_max'], '{:.3f}')}], "
                         f"{rec['repeats']} pairs")
    calllog = results.get("calllog", {}).get("targets", {})
    if calllog:
        from .calllog import line

        lines.append("")
        lines.append("6. TRANSFER_LOG cost on a training step: log on / off (median [q1-q3]; A/A control alongside)")
        lines.extend(line(target, rec) for target, rec in calllog.items())
    thirdparty = results.get("thirdparty", {}).get("targets", {})
    if thirdparty:
        from .thirdparty import line as thirdparty_line

        lines.append("")
        lines.append("7. The CUDA-only packages' replacements / their backend called directly (median [q1-q3]; goal 1.1x)")
        lines.extend(thirdparty_line(target, rec) for target, rec in thirdparty.items())
    standin = results.get("standin", {}).get("targets", {})
    if standin:
        from .standin import line as standin_line

        lines.append("")
        lines.append("11. The vendor stand-ins against the CPU they run on: device / CPU (median [q1-q3]; goal 1.5x per step)")
        lines.extend(standin_line(target, rec) for target, rec in standin.items())
    migrate = results.get("migrate", {}).get("dirs", {})
    if migrate:
        from .migrate import line as migrate_line

        lines.append("")
        lines.append("8. transfer scan / port on a checkout: files/s (default workers; -j1), what is left for a person")
        lines.extend(migrate_line(rec) for rec in migrate.values())
    misses = targets_missed(results)
    lines.append("")
    lines.append("Targets missed: " + ("none" if not misses else "; ".join(misses)))
    notes = findings(results)
    if notes:
        lines.append("Other findings: " + "; ".join(notes))
    return "\n".join(lines)


def findings(results: Dict[str, Any]) -> List[str]:
    """What is wrong besides speed: compiled code disagreeing with eager, measurements that errored."""
    notes = []
    for target, res in results.get("compile", {}).get("targets", {}).items():
        if C.is_ok(res):
            for name in res["summary"]["eager_compiled_disagreements"]:
                notes.append(f"compile[{target}]: compiled {name} differs from eager under the shim")
            if res["summary"].get("inductor_failure_caused_by_shim"):
                notes.append(f"compile[{target}]: inductor fails under the shim only: "
                             f"{res['summary']['inductor_failure_caused_by_shim'][:140]}")
    for family in ("calls", "training", "compile", "memory", "calllog", "thirdparty", "standin"):
        for target, res in results.get(family, {}).get("targets", {}).items():
            subs = {"": res}
            if family == "training" and isinstance(res, dict) and "single" in res:
                subs = {" single": res["single"], " ddp": res["ddp"]}
            for label, sub in subs.items():
                status = str(sub.get("status", "")) if isinstance(sub, dict) else ""
                if status.startswith("error"):
                    notes.append(f"{family}[{target}{label}]: {status[:200]}")
    for family in ("startup",):
        status = str(results.get(family, {}).get("status", "ok"))
        if status.startswith("error"):
            notes.append(f"{family}: {status[:200]}")
    return notes


def targets_missed(results: Dict[str, Any]) -> List[str]:
    missed = []
    for target, res in results.get("calls", {}).get("targets", {}).items():
        for row in res.get("rows", []) if C.is_ok(res) else []:
            if row.get("meets_target") is False:
                missed.append(f"calls[{target}] {row['call']} {row['ratio']:.2f}x > {row['target']}x")
    for target, res in results.get("training", {}).get("targets", {}).items():
        for mode in ("single", "ddp"):
            sub = res.get(mode)
            if C.is_ok(sub):
                for kind, rec in sub["models"].items():
                    if rec.get("meets_target") is False:
                        missed.append(f"training[{target} {mode} {kind}] {rec['ratio']:.3f}")
    startup = results.get("startup", {})
    for target, rec in startup.get("import_auto", {}).items():
        if rec.get("meets_target") is False:
            missed.append(f"import transfer.auto[{target}] {rec['median_ms']:.1f} ms")
    for key in ("python_pass", "python_import_torch"):
        for name, rec in startup.get(key, {}).items():
            if rec.get("meets_target") is False:
                missed.append(f"{key}[{name}] {rec['diff_ms']:+.2f} ms")
    for target, res in results.get("compile", {}).get("targets", {}).items():
        if C.is_ok(res) and res["summary"]["meets_target"] is False:
            missed.append(f"compile[{target}]")
    for path, rec in results.get("migrate", {}).get("dirs", {}).items():
        if rec.get("status") == "ok" and rec.get("meets_target") is False:
            missed.append(f"migrate {os.path.basename(path)}: scan {rec['scan_files_per_s']:.0f} files/s, "
                          f"port {rec['port_files_per_s']:.0f} files/s")
    for target, rec in results.get("calllog", {}).get("targets", {}).items():
        if C.is_ok(rec) and rec.get("meets_target") is False:
            missed.append(f"calllog[{target}] {rec['ratio']:.3f} > {rec['target']}")
    for target, rec in results.get("thirdparty", {}).get("targets", {}).items():
        for name, case in (rec.get("cases", {}) if C.is_ok(rec) else {}).items():
            if case.get("meets_target") is False:
                missed.append(f"thirdparty[{target}] {name} {case['ratio']:.3f} > {case['target']}")
    for target, rec in results.get("standin", {}).get("targets", {}).items():
        for name, step in (rec.get("steps", {}) if C.is_ok(rec) else {}).items():
            if step.get("meets_target") is False:
                missed.append(f"standin[{target}] {name} step {step['ratio']:.2f}x > {step['target']}x")
    return missed


def chart(results: Dict[str, Any], path: str) -> str:
    """Per-call ratios, one bar per target, IQR as error bars, targets as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    calls = {t: r for t, r in results.get("calls", {}).get("targets", {}).items() if C.is_ok(r)}
    labels: List[str] = []
    for res in calls.values():
        for row in res["rows"]:
            if row["call"] not in labels:
                labels.append(row["call"])
    targets = list(calls)
    fig_h = max(3.0, 0.42 * max(1, len(labels)) * max(1, len(targets)) ** 0.5 + 1.5)
    fig, ax = plt.subplots(figsize=(10, fig_h))
    if not targets:
        ax.text(0.5, 0.5, "no per-call results", ha="center", va="center")
        ax.set_axis_off()
    else:
        height = 0.8 / len(targets)
        max_ratio = max((r["ratio_q3"] for res in calls.values() for r in res["rows"]
                         if r.get("ratio_q3") is not None and not math.isnan(r["ratio_q3"])), default=2.0)
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for k, target in enumerate(targets):
            rows = {r["call"]: r for r in calls[target]["rows"]}
            ys, xs, lo, hi = [], [], [], []
            for i, label in enumerate(labels):
                row = rows.get(label)
                if row is None or row["ratio"] is None or math.isnan(row["ratio"]):
                    continue
                ys.append(i + (k - (len(targets) - 1) / 2) * height)
                xs.append(row["ratio"])
                lo.append(max(0.0, row["ratio"] - max(row["ratio_q1"], 0.41)))
                hi.append(max(0.0, row["ratio_q3"] - row["ratio"]))
            # Bars grow from 1.0 (native) towards the ratio, so faster-than-native points left.
            ax.barh(ys, [v - 1.0 for v in xs], left=1.0, height=height * 0.95, color=colors[k % len(colors)],
                    label=target)
            ax.errorbar(xs, ys, xerr=[lo, hi], fmt="none", ecolor="black", elinewidth=0.7, capsize=2)
        for x, style, name in ((1.0, "-", "1.0 (native)"), (C.TARGET_UNTOUCHED, ":", f"{C.TARGET_UNTOUCHED}x untouched"),
                               (C.TARGET_TRANSLATED, "--", f"{C.TARGET_TRANSLATED}x translated"), (C.TARGET_GETTER, "-.", f"{C.TARGET_GETTER}x is_cuda")):
            ax.axvline(x, color="grey", linestyle=style, linewidth=0.9, label=name)
        ax.set_xscale("log")
        ticks = [0.5, 0.8, 1, 1.2, 1.5, 2, 3, 5, 10, 20]
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{t:g}x" for t in ticks])
        ax.minorticks_off()
        ax.set_xlim(0.4, max(4.0, min(40.0, max_ratio * 1.3)))
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("time per call: CUDA call under transfer / hand port (median, bars: IQR; log scale)")
        ax.legend(fontsize=7, loc="lower right")
        meta = results.get("meta", {})
        ax.set_title(f"transfer per-call overhead ({'quick' if meta.get('quick') else 'full'} run, torch "
                     f"{meta.get('torch')}, {meta.get('machine', {}).get('cpus')} CPUs)", fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(results: Dict[str, Any]) -> str:
    """The figures of a run as Markdown tables (for benchmarks/README.md)."""
    meta = results.get("meta", {})
    mach = meta.get("machine", {})
    out: List[str] = []
    out.append(f"Run: {meta.get('date')}, commit {meta.get('commit')}, {'quick' if meta.get('quick') else 'full'} "
               f"run, {meta.get('seconds', 0) / 60:.0f} min. Machine: {mach.get('cpus')} CPUs "
               f"({mach.get('cpu_model', mach.get('processor'))}), {mach.get('platform')}, Python "
               f"{mach.get('python')}, torch {meta.get('torch')}; one intra-op thread per process; load "
               f"average at start {', '.join(f'{v:.1f}' for v in mach.get('loadavg_at_start', []))}.")
    for target, why in meta.get("unavailable", {}).items():
        out.append(f"\n{target}: unavailable: {why}")

    calls = results.get("calls", {}).get("targets", {})
    ok_targets = [t for t, r in calls.items() if C.is_ok(r)]
    if ok_targets:
        out.append("\n### 1. Per-call cost (ratio to the hand port; median of the per-repeat ratios, [q1-q3])\n")
        out.append("| call | target | " + " | ".join(ok_targets) + " |")
        out.append("|---|---|" + "---|" * len(ok_targets))
        labels: List[str] = []
        for t in ok_targets:
            for row in calls[t]["rows"]:
                if row["call"] not in labels:
                    labels.append(row["call"])
        ns_rows = []
        for label in labels:
            cells, ns_cells = [], []
            target_text = ""
            for t in ok_targets:
                row = next((r for r in calls[t]["rows"] if r["call"] == label), None)
                if row is None:
                    cells.append("")
                    ns_cells.append("")
                    continue
                target_text = f"{row['target']}x" if row["target"] else "info"
                flag = " **MISS**" if row["meets_target"] is False else ""
                cells.append(f"{row['ratio']:.2f} [{row['ratio_q1']:.2f}-{row['ratio_q3']:.2f}]{flag}")
                ns_cells.append(f"{row['native']:.0f} -> {row['shim']:.0f}")
            out.append(f"| `{label}` | {target_text} | " + " | ".join(cells) + " |")
            ns_rows.append(f"| `{label}` | " + " | ".join(ns_cells) + " |")
        out.append("\nThe same rows in ns per call, hand port -> CUDA call under the shim (empty-loop cost removed):\n")
        out.append("| call | " + " | ".join(ok_targets) + " |")
        out.append("|---|" + "---|" * len(ok_targets))
        out.extend(ns_rows)
    for t, r in calls.items():
        if not C.is_ok(r):
            out.append(f"\n{t}: {r.get('status')}")

    training = results.get("training", {}).get("targets", {})
    if training:
        out.append("\n### 2. Training step (ms per step; ratio = CUDA script under the shim / hand port; "
                   "A/A = hand port / hand port)\n")
        out.append("| target | mode | model | hand port ms | shim ms | ratio [q1-q3] | 95% CI of the median ratio "
                   "| A/A control [q1-q3] |")
        out.append("|---|---|---|---|---|---|---|---|")
        for target, res in training.items():
            if "single" not in res:
                out.append(f"| {target} | | | {res.get('status')} | | | | |")
                continue
            for mode in ("single", "ddp"):
                sub = res[mode]
                if not C.is_ok(sub):
                    out.append(f"| {target} | {mode} | | {str(sub.get('status'))[:120]} | | | | |")
                    continue
                for kind, rec in sub["models"].items():
                    flag = {"MISS": " **MISS**", "unresolved": " (unresolved)"}.get(_training_mark(rec), "")
                    out.append(f"| {target} | {mode} | {kind} | {rec['native']:.3f} | {rec['shim']:.3f} | "
                               f"{rec['ratio']:.3f} [{rec['ratio_q1']:.3f}-{rec['ratio_q3']:.3f}]{flag} | "
                               f"{_ci(rec)} | "
                               f"{rec.get('control_ratio', float('nan')):.3f} [{rec.get('control_q1', float('nan')):.3f}-"
                               f"{rec.get('control_q3', float('nan')):.3f}] |")

    startup = results.get("startup", {})
    if startup:
        out.append("\n### 3. Activation and start-up\n")
        out.append("| measurement | result |")
        out.append("|---|---|")
        for target, rec in startup.get("import_auto", {}).items():
            if rec.get("status") != "ok":
                out.append(f"| `import transfer.auto` after torch [{target}] | {rec.get('status')} |")
                continue
            extra = (f"; without .pyc: {rec['no_pyc_median_ms']:.1f} ms" if rec.get("no_pyc_median_ms") else "")
            flag = " **MISS**" if rec.get("meets_target") is False else ""
            out.append(f"| `import transfer.auto` after torch [{target}] | {rec['median_ms']:.1f} ms "
                       f"[{rec['q1_ms']:.1f}-{rec['q3_ms']:.1f}], {rec['runs']} runs (target < 20 ms){flag}{extra} |")
        for key, title in (("python_pass", "`python -c pass`"), ("python_import_torch", "`python -c 'import torch'`"),
                           ("device_backends", "`torch._import_device_backends()` (AUTOLOAD=0, then called)"),
                           ("autoload_reference", "`import torch`, AUTOLOAD=1 vs 0, transfer installed")):
            block = startup.get(key)
            if not block or "status" in block:
                if block:
                    out.append(f"| {title} | {block['status']} |")
                continue
            parts = []
            for name, rec in block.items():
                text = f"{name} {rec['median_ms']:.2f} ms"
                if "diff_ms" in rec:
                    lo, hi = rec["diff_ci95_ms"]
                    flag = " **MISS**" if rec.get("meets_target") is False else ""
                    text += f" ({rec['diff_ms']:+.2f} ms, 95% CI {lo:+.2f}..{hi:+.2f}){flag}"
                parts.append(text)
            runs = next(iter(block.values())).get("runs")
            out.append(f"| {title}, {runs} runs each | " + "; ".join(parts) + " |")

    compiled = results.get("compile", {}).get("targets", {})
    if compiled:
        out.append("\n### 4. torch.compile\n")
        out.append("| target | graph breaks shim / hand port | fullgraph=True eager | fullgraph=True inductor "
                   "(hand port) | compiled differs from eager under the shim |")
        out.append("|---|---|---|---|---|")
        for target, res in compiled.items():
            if not C.is_ok(res):
                out.append(f"| {target} | {res.get('status')} | | | |")
                continue
            s = res["summary"]
            out.append(f"| {target} | {s['graph_breaks_shim']} / {s['graph_breaks_native']} | "
                       f"{'compiles' if s['fullgraph_eager_compiles'] else 'fails'} | "
                       f"{'compiles' if s['fullgraph_inductor_compiles'] else 'fails'} "
                       f"({'compiles' if s['native_fullgraph_inductor_compiles'] else 'fails'}) | "
                       f"{', '.join(f'`{n}`' for n in s['eager_compiled_disagreements']) or 'none'} |")

    memory = results.get("memory", {}).get("targets", {})
    if memory:
        out.append("\n### 5. Peak RSS, short CNN training run\n")
        out.append("| target | hand port MiB | shim MiB | ratio [min-max] | pairs |")
        out.append("|---|---|---|---|---|")
        for target, rec in memory.items():
            if rec.get("status") != "ok":
                out.append(f"| {target} | {rec.get('status')} | | | |")
                continue
            out.append(f"| {target} | {rec['native']:.1f} | {rec['shim']:.1f} | {rec['ratio']:.3f} "
                       f"[{rec['ratio_min']:.3f}-{rec['ratio_max']:.3f}] | {rec['repeats']} |")
    calllog = results.get("calllog", {}).get("targets", {})
    if calllog:
        out.append("\n### 6. TRANSFER_LOG cost, training step\n")
        out.append("| target | log on / off [q1-q3] | A/A control | ms per step (off) | repeats |")
        out.append("|---|---|---|---|---|")
        for target, rec in calllog.items():
            if rec.get("status") != "ok":
                out.append(f"| {target} | {rec.get('status')} | | | |")
                continue
            out.append(f"| {target} | {rec['ratio']:.3f} [{rec['ratio_q1']:.3f}-{rec['ratio_q3']:.3f}] | "
                       f"{rec['control_ratio']:.3f} | {rec['native']:.2f} | {rec['repeats']} |")
    return "\n".join(out)


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m benchmarks.report",
                                     description="Re-print a run: table (default), --markdown, or --chart PNG")
    parser.add_argument("results", help="results.json of a run")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--chart", help="write the per-call chart here")
    args = parser.parse_args()
    with open(args.results) as fh:
        data = json.load(fh)
    if args.chart:
        chart(data, args.chart)
    print(markdown(data) if args.markdown else table(data))

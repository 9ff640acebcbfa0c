"""What the accuracy mode costs (TRANSFER_COMPARE; docs/accuracy.md): training steps, each mode side by side.

    python -m benchmarks.compare [--quick] [--steps N] [--full-steps M] [--repeats R] [--out FILE]

One process, the cpu target, one intra-op thread. Two workloads: a small GPT training step (nanoGPT's
shape: 4 layers, 4 heads, n_embd 256, block 128, batch 8, AdamW) and a conv net (3 conv/BN/ReLU blocks,
32x32 inputs, batch 32, SGD). For each, blocks of N steps rotate through the arms (order flipped every
repeat): mode off, ``nonfinite``, ``shadow:every=10``, ``shadow`` (full), ``record:FILE`` and
``against:FILE`` (the record of the same steps); each block starts a fresh session (`transfer.compare.start`)
from the same weights and optimizer state (so the against arm replays the recorded steps and finds no
divergence: its figure is the cost of comparing), and the steps are timed with the process's CPU time;
the sampled shadow check runs a whole period (10 steps, the first checked), the full one, every step
alike, M steps per block (2), the others N (5). Result: the median over repeats of
each arm's time per step / the off arm's of the same repeat, with the quartiles, each against its bar,
the record's bytes per step and the load average (the machine's other work shows in the spread). About
two minutes on a quiet 2-core machine with the defaults.

The bars (issue text): nonfinite <= 1.3x, shadow sampled 1 in 10 <= 2x, full <= 12x, record and
against <= 1.5x. msprobe's published costs on Ascend for comparison: 4.5x (dump L0, module level),
26x (L1, API level), 38x ("mix").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

MSPROBE = {"L0 dump": 4.5, "L1 dump": 26.0, "mix": 38.0}
BARS = {"nonfinite": 1.3, "shadow:every=10": 2.0, "shadow": 12.0, "record": 1.5, "against": 1.5}


def _gpt(torch):
    import torch.nn as nn
    import torch.nn.functional as F

    n_embd, n_head, block, vocab, layers = 256, 4, 128, 512, 4

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
            self.c_attn, self.c_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
            self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(n_embd, dim=2)
            q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
            x = x + self.c_proj(y)
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(block, n_embd)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f, self.lm_head = nn.LayerNorm(n_embd), nn.Linear(n_embd, vocab, bias=False)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.h:
                x = blk(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, vocab), targets.reshape(-1))

    torch.manual_seed(0)
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.randint(vocab, (8, block + 1)).cuda()

    def step():
        loss = model(data[:, :-1], data[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step, model, opt


def _convnet(torch):
    import torch.nn as nn

    torch.manual_seed(0)
    layers, channels = [], 3
    for width in (32, 64, 128):
        layers += [nn.Conv2d(channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2)]
        channels = width
    model = nn.Sequential(*layers, nn.Flatten(), nn.Linear(128 * 4 * 4, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(32, 3, 32, 32).cuda(), torch.randint(10, (32,)).cuda()

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step, model, opt


def measure(make, steps: int, repeats: int, folder: str, full_steps: int = 2):
    import copy

    import torch

    from transfer import compare

    step, model, opt = make(torch)
    for _ in range(2):
        step()  # warm up
    # every block starts from the same weights and optimizer state: the same steps in every arm, and the
    # against arm replays exactly the steps the record arm recorded (no divergence: the cost of checking)
    start_state = copy.deepcopy((model.state_dict(), opt.state_dict()))
    record = os.path.join(folder, "record.jsonl")
    arms = ["off", "nonfinite", "shadow:every=10", "shadow", "record", "against"]
    spec = {"record": f"record:{record}", "against": f"against:{record}"}
    times = {a: [] for a in arms}
    record_bytes = None
    findings = {}
    report = os.path.join(folder, "report.jsonl")
    for r in range(repeats):
        order = arms if r % 2 == 0 else ["off", "record", "against", "shadow", "shadow:every=10", "nonfinite"]
        for arm in order:
            if arm == "against" and not os.path.exists(record):
                continue
            model.load_state_dict(start_state[0])
            opt.load_state_dict(copy.deepcopy(start_state[1]))  # it adopts the tensors it is given
            # per step alike: full shadow checks every step, the others watch every step; the sampled arm
            # runs a whole period of 10 steps (one checked)
            n = {"shadow": full_steps, "shadow:every=10": max(steps, 10)}.get(arm, steps)
            if arm != "off":
                value = spec.get(arm, arm)
                sep = "," if ":" in value else ":"
                compare.start(compare.parse(f"{value}{sep}report={report}"), "cpu")
            start = time.process_time()
            for _ in range(n):
                step()
            elapsed = time.process_time() - start
            if arm != "off":
                devnull = open(os.devnull, "w")
                saved, sys.stderr = sys.stderr, devnull
                try:
                    line = compare.stop()
                finally:
                    sys.stderr = saved
                    devnull.close()
                if line and ("first divergence" in line or "first non-finite" in line):
                    findings[arm] = line  # a finding stops the checking: that arm's figure is not the cost
            if arm == "record":
                record_bytes = os.path.getsize(record) / n
            times[arm].append(elapsed / n)
    result = {}
    for arm in arms[1:]:
        ratios = sorted(t / o for t, o in zip(times[arm], times["off"]))
        if not ratios:
            continue
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        result[arm] = {"ratio": statistics.median(ratios), "q1": q[0], "q3": q[2]}
    result["off_step_s"] = statistics.median(times["off"])
    result["record_bytes_per_step"] = record_bytes
    result["findings"] = findings
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare")
    parser.add_argument("--quick", action="store_true", help="few steps and repeats (only shows it works)")
    parser.add_argument("--steps", type=int, default=5, help="steps per block (the sampled arm: 10 at least)")
    parser.add_argument("--full-steps", type=int, default=2, help="steps per block of the full shadow check")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = 5, 1
    os.environ.setdefault("TRANSFER_QUIET", "1")
    import torch

    torch.set_num_threads(1)
    import transfer

    transfer.install("cpu")
    results = {}
    loads = [os.getloadavg()[0]] if hasattr(os, "getloadavg") else []
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        for name, make in (("gpt", _gpt), ("convnet", _convnet)):
            results[name] = measure(make, args.steps, args.repeats, folder, args.full_steps)
    load = loads + [os.getloadavg()[0]] if loads else None
    print(f"accuracy mode, cpu target, torch {torch.__version__}: time per step / mode off (median of "
          f"{args.repeats} repeats of {args.steps} steps, sampled {max(args.steps, 10)}, full {args.full_steps}; q1-q3)"
          + (f"; load average {load[0]:.2f} at the start, {load[1]:.2f} at the end" if load else "")
          + f"; {time.monotonic() - began:.0f} s")
    print(f"{'mode':<18}{'bar':>6}" + "".join(f"{w:>30}" for w in results))
    for arm, bar in BARS.items():
        cells = ""
        for w in results:
            r = results[w].get(arm)
            if r is None:
                cells += f"{'-':>30}"
                continue
            verdict = "under" if r["ratio"] <= bar else "OVER"
            cells += f"{r['ratio']:>9.2f}x ({r['q1']:.2f}-{r['q3']:.2f}) {verdict:>5}"
        print(f"{arm:<18}{bar:>5}x{cells}")
    for w, r in results.items():
        print(f"{w}: mode off {r['off_step_s'] * 1e3:.1f} ms/step; record {r['record_bytes_per_step'] or 0:.0f} bytes/step")
        for arm, line in r["findings"].items():
            print(f"{w}: {arm} found a divergence (its figure is not the cost of checking): {line}")
    print("msprobe's published costs: " + ", ".join(f"{k} {v}x" for k, v in MSPROBE.items()))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"torch": torch.__version__, "steps": args.steps, "full_steps": args.full_steps,
                       "repeats": args.repeats, "load_average": load, "results": results,
                       "msprobe": MSPROBE, "bars": BARS}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

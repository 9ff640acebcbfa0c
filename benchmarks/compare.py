"""What the accuracy mode costs (TRANSFER_COMPARE; docs/accuracy.md): training steps, each mode side by side.

    python -m benchmarks.compare [--quick] [--steps N] [--full-steps M] [--repeats R] [--out FILE]
                                 [--workloads gpt,convnet,char4x64,char2x32] [--device cpu|npu|sdaa|gcu]

One process, the cpu target (or a vendor's, ``--device``: the stand-ins of tests/vendors on the path),
one intra-op thread. Four workloads: a small GPT training step (nanoGPT's shape: 4 layers, 4 heads,
n_embd 256, block 128, batch 8, AdamW), a conv net (3 conv/BN/ReLU blocks, 32x32 inputs, batch 32, SGD),
and two models of many small operations: a character-level transformer written as the public
character-level trainers write it (one module per attention head, a causal ``tril`` mask filled with
-inf, dropout 0.2, AdamW; block 32, vocabulary 65), at 4 layers, n_embd 64, batch 32 (``char4x64``) and
at 2 layers, n_embd 32, batch 16 (``char2x32``). For each, blocks of N steps rotate through the arms
(order flipped every repeat): mode off, ``nonfinite`` (the cheap level: docs/accuracy.md),
``nonfinite:exact`` (every operation watched: the mode before the cheap level), ``shadow:every=10``,
``shadow`` (full), ``record:FILE`` (its first step operation by operation, the others by the cheap level),
``record:FILE,exact``, ``against:FILE`` and ``against:FILE,exact`` (each against the record of the same
steps), and ``floor``: a dispatch mode that only runs each operation (what any per-operation watch costs
before it looks at anything; no bar). Each block starts a fresh session (`transfer.compare.start`) from the
same weights and optimizer state (so the against arms replay the recorded steps and find no divergence:
their figure is the cost of comparing), runs one step timed apart (the session's first: ``record``'s
operation-by-operation step; its ratio is printed below the table), then the N timed steps, with the
process's CPU time; the sampled shadow check times a whole period (10 steps, one checked), the full one
M steps per block (2), the others N (5). Result: the median over repeats of each arm's time per step /
the off arm's of the same repeat, with the quartiles, each against its bar, the record's bytes per step
and the load average (the machine's other work shows in the spread). About four minutes on a quiet
2-core machine with the defaults; ``--arms nonfinite,record,against`` times those alone (with mode off).

The bars (issue text): nonfinite <= 1.3x, shadow sampled 1 in 10 <= 2x, full <= 12x, record and
against <= 1.5x (the exact arms have none: they are the per-operation cost the cheap level avoids). msprobe's published costs on Ascend for comparison: 4.5x (dump L0, module level),
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
BARS = {"nonfinite": 1.3, "nonfinite:exact": None, "shadow:every=10": 2.0, "shadow": 12.0, "record": 1.5,
        "record:exact": None, "against": 1.5, "against:exact": None}
ARMS = ["off", "floor", "nonfinite", "nonfinite:exact", "shadow:every=10", "shadow", "record", "record:exact",
        "against", "against:exact"]


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


def _char_transformer(n_layer, n_embd, batch):
    """A character-level transformer as the public trainers write it (karpathy's ng-video-lecture gpt.py:
    one module per head, a ``tril`` buffer masked with -inf, dropout, AdamW)."""

    def make(torch):
        import torch.nn as nn
        import torch.nn.functional as F

        n_head, block_size, vocab, dropout = 4, 32, 65, 0.2

        class Head(nn.Module):
            def __init__(self, head_size):
                super().__init__()
                self.key = nn.Linear(n_embd, head_size, bias=False)
                self.query = nn.Linear(n_embd, head_size, bias=False)
                self.value = nn.Linear(n_embd, head_size, bias=False)
                self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)))
                self.dropout = nn.Dropout(dropout)

            def forward(self, x):
                B, T, C = x.shape
                k, q = self.key(x), self.query(x)
                wei = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
                wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
                wei = self.dropout(F.softmax(wei, dim=-1))
                return wei @ self.value(x)

        class MultiHeadAttention(nn.Module):
            def __init__(self, num_heads, head_size):
                super().__init__()
                self.heads = nn.ModuleList([Head(head_size) for _ in range(num_heads)])
                self.proj = nn.Linear(head_size * num_heads, n_embd)
                self.dropout = nn.Dropout(dropout)

            def forward(self, x):
                return self.dropout(self.proj(torch.cat([h(x) for h in self.heads], dim=-1)))

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.sa = MultiHeadAttention(n_head, n_embd // n_head)
                self.ffwd = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.ReLU(), nn.Linear(4 * n_embd, n_embd),
                                          nn.Dropout(dropout))
                self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)

            def forward(self, x):
                x = x + self.sa(self.ln1(x))
                return x + self.ffwd(self.ln2(x))

        class GPTLanguageModel(nn.Module):
            def __init__(self):
                super().__init__()
                self.token_embedding_table = nn.Embedding(vocab, n_embd)
                self.position_embedding_table = nn.Embedding(block_size, n_embd)
                self.blocks = nn.Sequential(*[Block() for _ in range(n_layer)])
                self.ln_f = nn.LayerNorm(n_embd)
                self.lm_head = nn.Linear(n_embd, vocab)

            def forward(self, idx, targets):
                B, T = idx.shape
                x = self.token_embedding_table(idx) + self.position_embedding_table(torch.arange(T, device="cuda"))
                logits = self.lm_head(self.ln_f(self.blocks(x)))
                return F.cross_entropy(logits.view(B * T, vocab), targets.view(B * T))

        torch.manual_seed(0)
        model = GPTLanguageModel().to("cuda")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        xb = torch.randint(vocab, (batch, block_size)).to("cuda")
        yb = torch.randint(vocab, (batch, block_size)).to("cuda")

        def step():
            loss = model(xb, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss

        return step, model, opt

    return make


WORKLOADS = {"gpt": _gpt, "convnet": _convnet, "char4x64": _char_transformer(4, 64, 32),
             "char2x32": _char_transformer(2, 32, 16)}


def _floor():
    """A dispatch mode that only runs each operation: the cost of being called per operation at all."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Floor(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    return Floor()


def measure(make, steps: int, repeats: int, folder: str, full_steps: int = 2, device: str = "cpu", arms=ARMS):
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
    everything = os.path.join(folder, "record-exact.jsonl")
    spec = {"record": f"record:{record}", "against": f"against:{record}", "record:exact": f"record:{everything},exact",
            "against:exact": f"against:{everything},exact"}
    recorded = {"against": record, "against:exact": everything}
    times = {a: [] for a in arms}
    first = {a: [] for a in arms}
    record_bytes = None
    findings = {}
    report = os.path.join(folder, "report.jsonl")
    for r in range(repeats):
        order = arms if r % 2 == 0 else arms[:1] + arms[:0:-1]
        for arm in order:
            if arm in recorded and not os.path.exists(recorded[arm]):
                continue
            model.load_state_dict(start_state[0])
            opt.load_state_dict(copy.deepcopy(start_state[1]))  # it adopts the tensors it is given
            torch.manual_seed(1)  # dropout draws the same numbers in every block (the against arm replays them)
            # per step alike: full shadow checks every step, the others watch every step; the sampled arm
            # runs a whole period of 10 steps (one checked)
            n = {"shadow": full_steps, "shadow:every=10": max(steps, 10)}.get(arm, steps)
            floor = _floor() if arm == "floor" else None
            if floor is not None:
                floor.__enter__()
            elif arm != "off":
                value = spec.get(arm, arm)
                sep = "," if ":" in value else ":"
                compare.start(compare.parse(f"{value}{sep}report={report}"), device)
            start = time.process_time()
            step()  # the session's first step (record: operation by operation)
            began = time.process_time()
            for _ in range(n):
                step()
            elapsed = time.process_time() - began
            if floor is not None:
                floor.__exit__(None, None, None)
            elif arm != "off":
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
                record_bytes = os.path.getsize(record) / (n + 1)
            times[arm].append(elapsed / n)
            first[arm].append(began - start)
    result = {}
    for arm in arms[1:]:
        ratios = sorted(t / o for t, o in zip(times[arm], times["off"]))
        if not ratios:
            continue
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        result[arm] = {"ratio": statistics.median(ratios), "q1": q[0], "q3": q[2],
                       "first": statistics.median(f / o for f, o in zip(first[arm], first["off"]))}
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
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--arms", default=",".join(ARMS[1:]),
                        help=f"comma-separated, of {', '.join(ARMS[1:])} (mode off always runs; against needs record)")
    parser.add_argument("--device", default="cpu",
                        help="the target: cpu, or a vendor (npu, sdaa, gcu) whose plug-in (or stand-in) imports")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.workloads.split(",")) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}: use {', '.join(WORKLOADS)}")
    arms = ["off"] + [a for a in args.arms.split(",") if a and a != "off"]
    if set(arms) - set(ARMS):
        parser.error(f"unknown arm(s) {', '.join(sorted(set(arms) - set(ARMS)))}: use {', '.join(ARMS[1:])}")
    if args.quick:
        args.steps, args.repeats = 5, 1
    os.environ.setdefault("TRANSFER_QUIET", "1")
    import torch

    torch.set_num_threads(1)
    import transfer

    transfer.install(args.device)
    results = {}
    loads = [os.getloadavg()[0]] if hasattr(os, "getloadavg") else []
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        for name in args.workloads.split(","):
            results[name] = measure(WORKLOADS[name], args.steps, args.repeats, folder, args.full_steps,
                                    args.device, arms)
    load = loads + [os.getloadavg()[0]] if loads else None
    print(f"accuracy mode, {args.device} target, torch {torch.__version__}: time per step / mode off (median of "
          f"{args.repeats} repeats of {args.steps} steps, sampled {max(args.steps, 10)}, full {args.full_steps}; q1-q3)"
          + (f"; load average {load[0]:.2f} at the start, {load[1]:.2f} at the end" if load else "")
          + f"; {time.monotonic() - began:.0f} s")
    print(f"{'mode':<18}{'bar':>6}" + "".join(f"{w:>30}" for w in results))
    for arm, bar in [("floor", None)] + list(BARS.items()):
        cells = ""
        for w in results:
            r = results[w].get(arm)
            if r is None:
                cells += f"{'-':>30}"
                continue
            verdict = "" if bar is None else "under" if r["ratio"] <= bar else "OVER"
            cells += f"{r['ratio']:>9.2f}x ({r['q1']:.2f}-{r['q3']:.2f}) {verdict:>5}"
        print(f"{arm:<18}" + (f"{bar:>5}x" if bar else f"{'-':>6}") + cells)
    print("a session's first step / mode off's: " + "; ".join(
        f"{w} " + ", ".join(f"{arm} {results[w][arm]['first']:.2f}x" for arm in ("nonfinite", "record", "against")
                             if arm in results[w]) for w in results))
    for w, r in results.items():
        print(f"{w}: mode off {r['off_step_s'] * 1e3:.1f} ms/step; record {r['record_bytes_per_step'] or 0:.0f} bytes/step")
        for arm, line in r["findings"].items():
            print(f"{w}: {arm} found a divergence (its figure is not the cost of checking): {line}")
    print("msprobe's published costs: " + ", ".join(f"{k} {v}x" for k, v in MSPROBE.items()))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"torch": torch.__version__, "device": args.device, "steps": args.steps, "full_steps": args.full_steps,
                       "repeats": args.repeats, "load_average": load, "results": results,
                       "msprobe": MSPROBE, "bars": BARS}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

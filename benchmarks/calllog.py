"""TRANSFER_LOG's cost on a training step (cpu target): log on vs off, interleaved.

``python -m benchmarks.calllog [--repeats N]``: one process; a small MLP trained
with CUDA spellings; blocks of steps alternate between transfer installed with
TRANSFER_LOG unset and set (install/uninstall outside the timed region).
Prints the median of the per-repeat ratios (log on / log off) with q1-q3.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time


def _step_block(torch, model, opt, data, steps):
    start = time.perf_counter()
    for _ in range(steps):
        x = data.cuda(non_blocking=True)
        y = torch.zeros(x.shape[0], dtype=torch.long, device="cuda")
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    import transfer

    os.environ["TRANSFER_QUIET"] = "1"
    logdir = tempfile.mkdtemp(prefix="transfer-log-bench-")
    ratios = []
    for repeat in range(args.repeats):
        times = {}
        for arm in (("off", "on") if repeat % 2 else ("on", "off")):
            os.environ.pop("TRANSFER_LOG", None)
            if arm == "on":
                os.environ["TRANSFER_LOG"] = logdir
            transfer.uninstall()
            transfer.install("cpu")
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            data = torch.randn(64, 256)
            _step_block(torch, model, opt, data, 3)  # warm-up
            times[arm] = _step_block(torch, model, opt, data, args.steps)
        ratios.append(times["on"] / times["off"])
    transfer.uninstall()
    q = statistics.quantiles(ratios, n=4)
    print(f"TRANSFER_LOG on / off, training step (MLP 256-512-10, batch 64, cpu target, 1 thread): "
          f"median {statistics.median(ratios):.3f} [q1 {q[0]:.3f} - q3 {q[2]:.3f}], {args.repeats} repeats "
          f"of {args.steps} steps; step off ~{times['off'] * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run a training script as ``__main__`` and print what a user checks, from outside the script's code.

    python probe.py SCRIPT [ARGS...]

Seeds torch (0) first, so two runs draw the same data and weights, then at the
first forward of a module with parameters prints one line per process:

    probe: rank R parameters on DEVICE backend BACKEND autocast TYPE DTYPE

(``backend none`` without a process group, ``autocast off`` outside autocast),
and after the script's last forward the sum of the parameters of the last
module called at the top (``probe: rank R digest X``). The script runs
unchanged, from its own folder, with ``sys.argv`` as it would have. Processes
the script starts with ``torch.multiprocessing.spawn`` are probed the same way
(seeded, then their function runs).
"""

import os
import runpy
import sys

import torch

_state = {"printed": False, "top": None}


def _rank():
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else int(os.environ.get("RANK", 0))


def _pre_hook(module, args):
    params = list(module.parameters())
    if not params:
        return
    if _state["top"] is None or _state["depth"] == 0:
        _state["top"] = module
    _state["depth"] = _state.get("depth", 0) + 1
    if _state["printed"]:
        return
    _state["printed"] = True
    dist = torch.distributed
    backend = dist.get_backend() if dist.is_available() and dist.is_initialized() else "none"
    kind = params[0].device.type
    try:
        enabled = torch.is_autocast_enabled(kind)
        dtype = torch.get_autocast_dtype(kind)
    except (TypeError, RuntimeError, AttributeError):
        enabled, dtype = False, None
    amp = f"{kind} {str(dtype).replace('torch.', '')}" if enabled else "off -"
    _say(f"probe: rank {_rank()} parameters on {params[0].device} backend {backend} autocast {amp}")


def _say(line):
    """One line in one write, between newlines: the ranks of a torchrun share one stdout, and print()
    writes its text and its newline separately, so another rank's output can land between them."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), f"\n{line}\n".encode())


def _post_hook(module, args, output):
    if any(True for _ in module.parameters()):
        _state["depth"] = max(0, _state.get("depth", 1) - 1)


def _digest():
    top = _state["top"]
    if top is not None:
        with torch.no_grad():
            total = sum(float(p.detach().double().cpu().sum()) for p in top.parameters())
        _say(f"probe: rank {_rank()} digest {total:.6f}")


def _install():
    torch.manual_seed(0)
    torch.nn.modules.module.register_module_forward_pre_hook(_pre_hook)
    torch.nn.modules.module.register_module_forward_hook(_post_hook)


def _spawned(index, function, *args):
    """A process of ``torch.multiprocessing.spawn``: probed, then the script's function."""
    _install()
    try:
        function(index, *args)
    finally:
        _digest()


def _spawn(spawn):
    def probed(fn, args=(), *rest, **kwargs):
        import probe  # this file, importable by its name in the spawned processes (their sys.path is ours)

        return spawn(probe._spawned, (fn, *args), *rest, **kwargs)

    return probed


if __name__ == "__main__":
    _install()
    import torch.multiprocessing

    torch.multiprocessing.spawn = _spawn(torch.multiprocessing.spawn)
    script = os.path.abspath(sys.argv[1])
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        _digest()

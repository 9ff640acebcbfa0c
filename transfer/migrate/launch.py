"""The launch script ``transfer port --main FILE`` writes: ``run_distributed_<device>.sh``.

msFmkTransplt leaves a ``run_distributed_npu.sh`` beside a converted tree; this
is its counterpart for every vendor profile, read from `transfer.profiles`:

* how the entry script starts its processes decides the command (`mode`):
  ``mp.spawn`` / ``torch.multiprocessing.spawn`` starts its own workers, so
  ``python FILE``; ``init_process_group`` without spawn expects a launcher, so
  ``torchrun`` with one process per device (``NPROC``, default: every device
  the vendor runtime sees); anything else is one process, ``python FILE``;
* CUDA-era settings a job script already exports carry over: the
  ``CUDA_VISIBLE_DEVICES`` list becomes the vendor's own visible-devices
  variable and the ``NCCL_*`` / ``TORCH_NCCL_*`` / ``CUDA_*`` variables the
  profile renames become the vendor's (with the unit conversion the profile
  states), unless those are already set;
* multi-node: ``NNODES``, ``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``.

The script runs the ported code natively: it never mentions transfer.
"""

from __future__ import annotations

import ast
import shlex

from ..profiles import PROFILES

SPAWN, TORCHRUN, SINGLE = "spawn", "torchrun", "single"


def script_name(profile: str) -> str:
    return f"run_distributed_{PROFILES[profile].device_type}.sh"


def mode(source: str) -> str:
    """How the entry script expects to be started: SPAWN, TORCHRUN or SINGLE."""
    called = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            called.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    if called & {"spawn", "start_processes"}:
        return SPAWN
    if "init_process_group" in called:
        return TORCHRUN
    return SINGLE


def render(profile: str, main: str, source: str) -> str:
    """The text of the launch script for entry script `main` (a path relative to the script's folder)."""
    p = PROFILES[profile]
    how = mode(source)
    lines = [
        "#!/bin/sh",
        f"# Written by `transfer port --device {p.name} --main {main}`: starts {main} on {p.vendor} "
        f"{p.device_type} devices ({p.package or 'torch'}, {p.backend}).",
    ]
    if how == TORCHRUN:
        lines += [
            "# One process per device under torchrun; NPROC=<n> for fewer. Several nodes:",
            f"#   NNODES=2 NODE_RANK=0 MASTER_ADDR=<node 0> MASTER_PORT=29500 ./{script_name(profile)} [args]",
        ]
    else:
        lines.append(f"# {main} starts its own processes; this runs it once." if how == SPAWN
                     else f"# {main} is a single-process script; this runs it once.")
    lines += [
        "set -e",
        'HERE=$(cd "$(dirname "$0")" && pwd)',
        'PYTHON=${PYTHON:-python}',
    ]
    if p.visible_devices_env:
        lines += _carry("CUDA_VISIBLE_DEVICES", p.visible_devices_env, '"$CUDA_VISIBLE_DEVICES"')
    for nccl, rename in sorted(p.env.items()):
        if rename.target is None or rename.interfaces:
            continue  # built in on the target, or a conversion that needs the host's interfaces (gloo)
        if rename.scale == 1.0:
            value = f'"${nccl}"'
        else:  # e.g. NCCL_BUFFSIZE bytes -> HCCL_BUFFSIZE MB, at least 1
            value = f'"$(( ${nccl} * {round(rename.scale * 2 ** 20)} / {2 ** 20} > 0 ? ' \
                    f'${nccl} * {round(rename.scale * 2 ** 20)} / {2 ** 20} : 1 ))"'
        lines += _carry(nccl, rename.target, value)
    entry = f'"$HERE"/{shlex.quote(main)}'
    if how == TORCHRUN:
        count = f"import {', '.join(['torch'] + ([p.package] if p.package else []))}; " \
                f"print(torch.{p.device_type}.device_count())"
        lines += [
            f"NPROC=${{NPROC:-$(\"$PYTHON\" -c '{count}')}}",
            'exec "$PYTHON" -m torch.distributed.run --nproc_per_node="$NPROC" --nnodes="${NNODES:-1}" '
            '--node_rank="${NODE_RANK:-0}" --master_addr="${MASTER_ADDR:-127.0.0.1}" '
            f'--master_port="${{MASTER_PORT:-29500}}" {entry} "$@"',
        ]
    else:
        lines.append(f'exec "$PYTHON" {entry} "$@"')
    return "\n".join(lines) + "\n"


def _carry(cuda_name: str, vendor_name: str, value: str) -> list:
    return [f'if [ -n "${{{cuda_name}+x}}" ] && [ -z "${{{vendor_name}+x}}" ]; then',
            f"    export {vendor_name}={value}",
            "fi"]

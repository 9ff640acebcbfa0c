"""Small synthetic data sets and a per-rank result file, shared by the framework scripts.

A user's project has the same kind of helper module next to its training script.
"""

import json
import os

import torch
import torch.distributed as dist

CLASSES = 4
FEATURES = 8


def blobs(n=512, seed=0):
    """Four well-separated Gaussian clusters in 8 dimensions: (x float32 [n, 8], y int64 [n])."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(CLASSES, FEATURES, generator=g) * 3
    y = torch.randint(0, CLASSES, (n,), generator=g)
    x = centers[y] + torch.randn(n, FEATURES, generator=g)
    return x, y


def counting_sequences(n=256, length=12, vocab=16, seed=0):
    """Token sequences that count up modulo `vocab` from a random start: [n, length] int64."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (n, 1), generator=g)
    return (start + torch.arange(length)) % vocab


def whole(tensor):
    """`tensor` whole on this rank: a DTensor's shards (FSDP2, tensor parallel) gathered on their devices. A
    sharded DTensor moved to the host first would reduce its host copy over the mesh's group, which has no
    backend for the CPU under NCCL ("No backend type associated with device type cpu")."""
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


def write_result(out_dir, model, **fields):
    """Write <out_dir>/result-<rank>.json: what this rank saw (devices, process group, metrics)."""
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    record = {
        "rank": rank,
        "world_size": dist.get_world_size() if dist.is_initialized() else 1,
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "param_devices": sorted({str(p.device) for p in model.parameters()}),
        "checksum": float(sum(whole(p.detach()).double().sum().cpu() for p in model.parameters())),
        "pid": os.getpid(),
        **fields,
    }
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"result-{rank}.json"), "w") as f:
        json.dump(record, f)

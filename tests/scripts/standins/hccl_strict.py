"""torch_npu-native collectives that ProcessGroupHCCL refuses, and those it reduces its own way.

Launch: torchrun --nproc_per_node=2 hccl_strict.py OUT_DIR   (torch_npu importable; no transfer)
Each rank writes OUT_DIR/rank<R>.json: per case {"error": {"type", "message"}} or {"result": values}, and
the warnings dist.gather emitted.
"""
import json
import os
import sys
import warnings

import torch
import torch_npu  # noqa: F401
import torch.distributed as dist


def main(out):
    rank = int(os.environ["LOCAL_RANK"])
    torch.npu.set_device(rank)
    dist.init_process_group("hccl")
    d = torch.device("npu", rank)
    cases = {}

    def case(name, call, result=None):
        try:
            call()
            cases[name] = {"result": None if result is None else result.cpu().tolist()}
        except Exception as exc:
            cases[name] = {"error": {"type": type(exc).__name__, "message": str(exc)}}

    f64 = torch.ones(2, dtype=torch.float64, device=d)
    case("all_reduce_float64", lambda: dist.all_reduce(f64))
    case("reduce_float64", lambda: dist.reduce(torch.ones(2, dtype=torch.float64, device=d), dst=0))
    case("all_reduce_band", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32, device=d), op=dist.ReduceOp.BAND))
    case("all_reduce_bor", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32, device=d), op=dist.ReduceOp.BOR))
    case("all_reduce_bxor", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32, device=d), op=dist.ReduceOp.BXOR))
    flags = torch.tensor([rank == 0, True, False], device=d)
    case("all_reduce_bool", lambda: dist.all_reduce(flags), flags)
    small = torch.tensor([200, 1 + rank], dtype=torch.uint8, device=d)
    case("all_reduce_uint8", lambda: dist.all_reduce(small), small)
    case("reduce_scatter_tensor_uint8", lambda: dist.reduce_scatter_tensor(
        torch.empty(1, dtype=torch.uint8, device=d), torch.ones(2, dtype=torch.uint8, device=d)))
    case("reduce_scatter_tensor_float64", lambda: dist.reduce_scatter_tensor(
        torch.empty(1, dtype=torch.float64, device=d), torch.ones(2, dtype=torch.float64, device=d)))
    floats = torch.tensor([1.0, 3.0], device=d) * (rank + 1)
    case("all_reduce_avg_float32", lambda: dist.all_reduce(floats, op=dist.ReduceOp.AVG), floats)
    case("all_reduce_avg_int64", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int64, device=d),
                                                         op=dist.ReduceOp.AVG))
    case("recv_without_source", lambda: dist.recv(torch.empty(1, device=d)))
    case("all_to_all_single_0dim", lambda: dist.all_to_all_single(torch.empty((), device=d), torch.ones((), device=d)))
    case("process_group_gather", lambda: dist.group.WORLD._get_backend(d).gather(
        [[torch.empty(1, device=d) for _ in range(2)]] if rank == 0 else [], [torch.ones(1, device=d)],
        dist.GatherOptions()).wait())
    gathered = [torch.empty(2, dtype=torch.float64, device=d) for _ in range(2)] if rank == 0 else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        case("gather_float64", lambda: dist.gather(torch.full((2,), rank + 0.5, dtype=torch.float64, device=d),
                                                   gathered, dst=0))
    objects = [None, None] if rank == 0 else None
    case("gather_object", lambda: dist.gather_object({"rank": rank}, objects, dst=0))
    report = {"rank": rank, "cases": cases, "gather_warnings": [str(w.message) for w in caught],
              "gathered": [g.cpu().tolist() for g in gathered] if gathered else None, "objects": objects,
              "gather_is": f"{dist.gather.__module__}.{dist.gather.__name__}"}
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump(report, fh)
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

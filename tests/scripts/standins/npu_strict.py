"""Child of tests/test_npu_strict.py: exercise one rule of the strict npu stand-in and print a JSON report.

    python npu_strict.py MODE[,MODE...]        (PYTHONPATH with tests/vendors; environment set by the test)

Python warnings are turned into errors after the import: torch_npu's warnings go through c10's base handler to stderr and
are never Python warnings, so none may surface here. The report's last line is ``REPORT <json>``.
"""

import json
import sys
import warnings

import torch  # noqa: E402
import torch_npu  # noqa: E402

warnings.simplefilter("error")  # from here on: what the rules do must not be a Python warning
warnings.filterwarnings("ignore", message=".*Sparse invariant checks.*")  # torch's own, on sparse creation

modes = sys.argv[1].split(",")  # several sections in one process (each section's ops are its own)
report = {"strict": torch_npu.STRICT, "torch": torch.__version__}


def error_of(fn):
    try:
        fn()
    except RuntimeError as exc:
        return str(exc)
    return None


x_cpu = torch.linspace(0.5, 3.0, 12).reshape(3, 4)
x = x_cpu.to("npu")

def section(mode):
    if mode == "fallback":
            # lgamma and digamma are not in torch_npu's list: CPU fallback, one warning per operator
            first = torch.lgamma(x)
            second = torch.lgamma(x)
            report["lgamma_equal"] = bool(torch.equal(first.cpu(), torch.lgamma(x_cpu)) and torch.equal(second.cpu(), first.cpu()))
            report["lgamma_device"] = str(first.device)
            report["digamma_equal"] = bool(torch.equal(torch.digamma(x).cpu(), torch.digamma(x_cpu)))
            report["mm_equal"] = bool(torch.equal((x @ x.T).cpu(), x_cpu @ x_cpu.T))  # in the list: no warning
    elif mode == "fallback_disabled":
            report["lgamma_error"] = error_of(lambda: torch.lgamma(x))
            report["mm_equal"] = bool(torch.equal((x @ x.T).cpu(), x_cpu @ x_cpu.T))
    elif mode == "double":
            a = x.double()
            b = x.to(torch.float64)
            c = torch.ones(2, dtype=torch.float64, device="npu")  # created as float64: stays float64
            d = x_cpu.to("npu", torch.float64)  # a device is given: no substitution
            report["dtypes"] = [str(t.dtype) for t in (a, b, c, d)]
            report["values_equal"] = bool(torch.equal(a.cpu(), x_cpu)) and bool(torch.equal(b.cpu(), x_cpu))
    elif mode == "fp64_matmul":
            w = torch.ones(4, 4, dtype=torch.float64, device="npu")
            report["matmul_error"] = error_of(lambda: torch.matmul(w, w))
            report["mm_error"] = error_of(lambda: torch.mm(w, w))
            report["fp32_equal"] = bool(torch.equal(torch.matmul(x, x.T).cpu(), x_cpu @ x_cpu.T))
    elif mode == "dims":
            nine = torch.ones([1] * 8 + [2]).to("npu")
            eight = torch.ones([1] * 7 + [2]).to("npu")
            report["nine_error"] = error_of(lambda: torch.abs(nine))
            report["eight_equal"] = bool(torch.equal(torch.abs(eight).cpu(), torch.ones([1] * 7 + [2])))
    elif mode == "sparse":
            i = torch.tensor([[0, 1, 2], [0, 1, 2]])
            v = torch.tensor([1.0, 2.0, 4.0])
            s = torch.sparse_coo_tensor(i.to("npu"), v.to("npu"), (4, 4))
            ref = torch.sparse_coo_tensor(i, v, (4, 4))
            report["layout"] = str(s.layout)
            report["device"] = str(s.device)
            report["to_dense_equal"] = bool(torch.equal(s.to_dense().cpu(), ref.to_dense()))
            report["values_equal"] = bool(torch.equal(s._values().cpu(), v))
            report["unsupported_error"] = error_of(lambda: torch.sparse.softmax(s, 0))  # CPU and CUDA kernels differ
    elif mode == "permissive":
            w = torch.ones(4, 4, dtype=torch.float64, device="npu")
            report["fp64_matmul"] = str(torch.matmul(w, w).dtype)
            report["double"] = str(x.double().dtype)
            report["lgamma_equal"] = bool(torch.equal(torch.lgamma(x).cpu(), torch.lgamma(x_cpu)))
    else:
            raise SystemExit(f"unknown mode {mode}")


for mode in modes:
    section(mode)

print("REPORT " + json.dumps(report), flush=True)

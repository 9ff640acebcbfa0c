"""torch's own ``is_cuda`` reads on the cpu target (transfer/patches/torch_sites.py, docs/torch-is-cuda-sites.md).

Every site in the installed torch is classified and documented; the sites whose CUDA branch would hand
host memory to CUDA-only code (``__cuda_array_interface__``) see the real answer; the CUDA branches that
compute what CUDA computes stay; uninstall restores torch's code.
"""

import inspect
import os

import numpy as np
import pytest
import torch

TensorBase = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase  # torch < 2.3: _TensorBase


def test_every_is_cuda_read_in_torch_is_classified_and_documented():
    """`python -m transfer.patches.torch_sites` lists every `.is_cuda` read in the installed torch; each
    has a decision, and docs/torch-is-cuda-sites.md is the table (regenerate it with
    `python -m transfer.patches.torch_sites --markdown > docs/torch-is-cuda-sites.md`)."""
    from transfer.patches import torch_sites

    sites = list(torch_sites.scan())
    assert len(sites) > 20
    missing = [s for s in sites if torch_sites.decision(s) is None]
    assert not missing, f"classify these in transfer/patches/torch_sites.py SITES: {missing}"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "torch-is-cuda-sites.md"), encoding="utf-8") as fh:
        assert fh.read() == torch_sites.markdown(), "docs/torch-is-cuda-sites.md is stale"


def test_cuda_array_interface_is_not_offered_for_host_memory(cpu_target):
    """torch/_tensor.py offers __cuda_array_interface__ when `self.is_cuda`: on CUDA for device
    memory only (hasattr of a host tensor is False). On the cpu target it handed host pointers to
    consumers (CuPy, Numba) as CUDA memory; now torch's own read sees the real answer: a host
    tensor has none (as on CUDA) and a tensor standing for a CUDA tensor raises torch's own error,
    while the script's `x.is_cuda` still answers True at the native getter's cost."""
    h, d = torch.ones(2), torch.ones(2, device="cuda")
    assert not hasattr(h, "__cuda_array_interface__") and "__cuda_array_interface__" not in dir(h)
    with pytest.raises(AttributeError, match="non-CUDA tensor"):
        d.__cuda_array_interface__
    assert d.is_cuda and h.is_cuda  # the script's view: every tensor of the cpu target is "on CUDA"
    assert inspect.getattr_static(torch.Tensor, "is_cuda") is TensorBase.__dict__["is_cpu"]  # a C getter


def test_cuda_branches_that_compute_what_cuda_computes_stay(cpu_target):
    """Decision CUDA: torch._numpy's lstsq uses the 'gels' driver for CUDA tensors, CUDA's only
    driver; the cpu target gives CUDA's answer (a rank-deficient system: gels != gelsd), while a
    NATIVE site in the same process sees the real is_cuda."""
    tnp = pytest.importorskip("torch._numpy")  # torch >= 2.1
    assert not hasattr(torch.ones(1, device="cuda"), "__cuda_array_interface__")
    a = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0001]])
    b = np.array([1.0, 2.0, 3.0])
    got = tnp.linalg.lstsq(tnp.asarray(a), tnp.asarray(b), rcond=None)[0].tensor
    gels = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b).unsqueeze(1), driver="gels").solution.squeeze(1)
    assert torch.allclose(got.double(), gels)


def test_uninstall_restores_torchs_code():
    import transfer
    from transfer.patches import torch_is_cuda

    code = torch.Tensor.__cuda_array_interface__.fget.__code__
    transfer.uninstall()
    os.environ["TRANSFER_QUIET"] = "1"
    transfer.install("cpu")
    try:
        assert torch.Tensor.__cuda_array_interface__.fget.__code__ is not code
        assert torch_is_cuda  # the area that renamed it
    finally:
        transfer.uninstall()
    assert torch.Tensor.__cuda_array_interface__.fget.__code__ is code
    assert not hasattr(torch.Tensor, "_transfer_native_is_cuda")

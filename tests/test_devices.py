"""Exact parsing and translation of device arguments (transfer.devices)."""

import torch

from transfer.devices import Target, parse_cuda, translations_table


def npu_target():
    # 'privateuseone' is what a vendor device is called before its package renames it.
    return Target("privateuseone", lambda: 4)


def test_parse_accepts_only_real_cuda_devices():
    assert parse_cuda("cuda") == (None,)
    assert parse_cuda("cuda:3") == (3,)
    assert parse_cuda("cuda:256") == (0,)  # c10 stores the index in an int8, as torch.device('cuda:256') shows
    assert parse_cuda(torch.device("cuda", 2)) == (2,)
    assert parse_cuda(torch.device("cuda")) == (None,)
    assert parse_cuda(1) == (1,)
    assert parse_cuda(-1) == (-1,)  # an ordinal CUDA rejects: Target.device raises for it
    # torch rejects the spellings in the second row (torch.device raises): no CUDA device either
    for other in ("cpu", "npu:0", "cuda:nccl", "cuda_model.pt", "/ckpt/cuda/x.pt", "cudax", "cuda:", "cuda:-1",
                  "CUDA:0", " Cuda:1 ", "cuda:01", "cuda:\u00b2", " cuda", "cuda ",
                  True, 1.0, None, torch.device("cpu"), {"cuda": 1}):
        assert parse_cuda(other) is None, other


def test_vendor_translation_keeps_index_and_identity_of_others():
    t = npu_target()
    assert t.translate("cuda") == torch.device("privateuseone")
    assert t.translate("cuda:3") == torch.device("privateuseone", 3)
    malformed = "CUDA:0"
    assert t.translate(malformed) is malformed  # handed to torch unchanged: torch raises its own error
    assert t.translate(torch.device("cuda", 1)) == torch.device("privateuseone", 1)
    assert t.translate(2) == torch.device("privateuseone", 2)
    path = "/ckpt/cuda_model.pt"
    assert t.translate(path) is path
    key = "cuda_version"
    assert t.translate(key) is key
    cpu = torch.device("cpu")
    assert t.translate(cpu) is cpu


def test_cpu_translation_drops_index_and_rejects_out_of_range():
    t = Target("cpu", lambda: 2)
    assert t.translate("cuda:1") == torch.device("cpu")
    assert t.translate(0) == torch.device("cpu")
    try:
        t.translate("cuda:7")
    except RuntimeError as exc:
        assert "cuda:7" in str(exc) and "2 device" in str(exc) and "TRANSFER_CPU_DEVICES" in str(exc)
    else:
        raise AssertionError("cuda:7 on a 2-device cpu target must fail")


def test_translator_caches_and_records_first_call_site():
    t = npu_target()
    tr = t.translator("Tensor.to")
    assert tr("cuda:1") == torch.device("privateuseone", 1)  # this line is the recorded site
    assert tr("cuda:1") is tr("cuda:1")  # cached object
    assert tr("cpu") == "cpu"
    rows = translations_table(t)
    assert len(rows) == 1
    row = rows[0]
    assert row["api"] == "Tensor.to" and row["argument"] == "'cuda:1'" and row["to"] == "privateuseone:1"
    assert row["first_site"].startswith(__file__)

"""TRANSFER_LOG: one JSON line per CUDA-facing call site, exact for an example script."""

import json
import os
import subprocess
import sys

from conftest import EXAMPLES, INSTALLED, ROOT, clean_env

EXPECTED_LINES = [49, 53, 53, 54, 57, 58, 58, 62, 65, 65, 68, 74, 75, 77, 77, 77, 84, 87, 94, 95, 100]


def test_log_of_train_cuda_has_each_call_site_once(tmp_path):
    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET="1", TRANSFER_LOG=str(tmp_path / "log"))
    if not INSTALLED:
        env["PYTHONPATH"] = ROOT
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, "train_cuda.py"), "--epochs", "2",
                           "--workdir", str(tmp_path / "w")], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(tmp_path / "log") == ["transfer-log-rank0.jsonl"]
    with open(tmp_path / "log" / "transfer-log-rank0.jsonl") as fh:
        records = [json.loads(line) for line in fh]
    script = os.path.join(EXAMPLES, "train_cuda.py")
    assert {r["site"].rsplit(":", 1)[0] for r in records} == {script}
    assert sorted(int(r["site"].rsplit(":", 1)[1]) for r in records) == EXPECTED_LINES  # 2 epochs, logged once
    by_call = {r["call"]: r for r in records}
    assert by_call["torch.cuda.synchronize()"]["source"] == "torch.cuda.synchronize()"
    assert by_call["torch.cuda.max_memory_allocated()"]["class"] == "placeholder"
    assert by_call["Tensor.to('cuda', non_blocking=True)"]["became"] == "'cuda' -> cpu"
    assert "21 CUDA-facing call site(s) logged" in proc.stderr


def test_one_log_file_per_rank_under_torchrun(tmp_path):
    from conftest import free_port

    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET="1", TRANSFER_LOG=str(tmp_path / "log"))
    if not INSTALLED:
        env["PYTHONPATH"] = ROOT
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={free_port()}", os.path.join(EXAMPLES, "ddp_syncbn.py")],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path / "log")) == ["transfer-log-rank0.jsonl", "transfer-log-rank1.jsonl"]
    for rank in (0, 1):
        with open(tmp_path / "log" / f"transfer-log-rank{rank}.jsonl") as fh:
            records = [json.loads(line) for line in fh]
        assert {r["rank"] for r in records} == {rank}
        assert any("init_process_group(" in r["call"] and r["became"] == "backend 'gloo'" for r in records)
    assert proc.stderr.count("CUDA-facing call site(s) logged") == 1  # the summary: rank 0 only

"""The wild-scripts session's own pieces (wild/): its manifest, its synthetic data and its verdicts.

The session itself runs outside CI (`nox -s wild -- DIR`, it needs the clones); here: the manifest names 50+
scripts from 25+ repositories at full commits, each data maker writes what the script's reader reads, a run's
verdict follows its outcome (exit 0 without the completion sign is a failure), and docs/results.md's wild section
is what the recorded run (docs/results/wild.json) says, with every failure classified.
"""

import json
import os
import pickle
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

WILD = os.path.join(ROOT, "wild")
sys.path.insert(0, WILD)

import data  # noqa: E402
import manifest  # noqa: E402
import run  # noqa: E402


def test_manifest_names_fifty_scripts_from_twenty_five_repositories_at_full_commits():
    names = [s.name for s in manifest.SCRIPTS]
    assert len(names) == len(set(names))
    assert len(names) >= 50
    assert len({manifest.REPOS[s.repo][0] for s in manifest.SCRIPTS}) >= 25
    for folder, (repo, commit) in manifest.REPOS.items():
        assert re.fullmatch(r"[0-9a-f]{40}", commit), folder
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", repo), folder
    for script in manifest.SCRIPTS:
        assert script.repo in manifest.REPOS, script.name
        assert script.native is not None or script.why_not_native, script.name
        for maker, _path, _options in script.data:
            assert maker in data.MAKERS, (script.name, maker)
    for key in manifest.KNOWN:
        assert key[0] in names, key
    commands = run.clone_commands("/clones")
    for folder, (repo, commit) in manifest.REPOS.items():
        assert f"https://github.com/{repo}.git /clones/{folder} && git -C /clones/{folder} checkout -q {commit}" in commands


def test_mnist_files_are_what_torchvision_reads(tmp_path):
    data.mnist(str(tmp_path), n=10, test=4)
    raw = tmp_path / "MNIST" / "raw"
    magic, count, rows, cols = struct.unpack(">IIII", (raw / "train-images-idx3-ubyte").read_bytes()[:16])
    assert (magic, count, rows, cols) == (2051, 10, 28, 28)
    labels = (raw / "train-labels-idx1-ubyte").read_bytes()
    assert struct.unpack(">II", labels[:8]) == (2049, 10) and len(labels) == 8 + 10
    assert max(labels[8:]) < 10
    assert len((raw / "t10k-images-idx3-ubyte").read_bytes()) == 16 + 4 * 28 * 28


def test_cora_files_are_what_pygcn_reads(tmp_path):
    data.cora(str(tmp_path), nodes=50, features=8, edges=40)
    content = np.genfromtxt(str(tmp_path / "cora.content"), dtype=np.dtype(str))
    assert content.shape == (50, 1 + 8 + 1)
    ids = set(content[:, 0])
    edges = np.genfromtxt(str(tmp_path / "cora.cites"), dtype=np.int32)
    assert edges.shape == (40, 2) and {str(v) for v in edges.flatten()} <= ids


def test_nanogpt_files_are_what_its_prepare_writes(tmp_path):
    data.nanogpt_chars(str(tmp_path), chars=2000)
    meta = pickle.load(open(tmp_path / "meta.pkl", "rb"))
    train = np.memmap(str(tmp_path / "train.bin"), dtype=np.uint16, mode="r")
    assert len(train) > 1000 and int(train.max()) < meta["vocab_size"]
    assert "".join(meta["itos"][int(i)] for i in train[:20]) == "".join(
        meta["itos"][meta["stoi"][meta["itos"][int(i)]]] for i in train[:20])


def test_yolo_files_are_what_yolov5_reads(tmp_path):
    from PIL import Image

    data.yolo(str(tmp_path / "d"), n=4, size=64, classes=2, config=str(tmp_path / "cfg"))
    d = tmp_path / "d"
    assert "train: images/train" in (d / "data.yaml").read_text() and "1: c1" in (d / "data.yaml").read_text()
    assert (tmp_path / "cfg" / "Arial.ttf").stat().st_size > 10000  # the font yolov5's check_font would download
    for split in ("train", "val"):
        images = sorted((d / "images" / split).iterdir())
        assert [p.stem for p in images] == sorted(p.stem for p in (d / "labels" / split).iterdir())
        for image in images:
            pixels = np.asarray(Image.open(image).convert("RGB"), dtype=np.float32).max(axis=2)
            assert pixels.shape == (64, 64)
            for line in (d / "labels" / split / (image.stem + ".txt")).read_text().split("\n")[:-1]:
                k, cx, cy, w, h = line.split()
                cx, cy, w, h = (float(v) for v in (cx, cy, w, h))
                assert int(k) in (0, 1) and 0 <= cx - w / 2 and cx + w / 2 <= 1 and 0 <= cy - h / 2 and cy + h / 2 <= 1
                box = pixels[round((cy - h / 2) * 64) + 1:round((cy + h / 2) * 64) - 1,
                             round((cx - w / 2) * 64) + 1:round((cx + w / 2) * 64) - 1]
                assert box.mean() > 200 and box.mean() > pixels.mean() + 50  # the labelled box is the bright object


def test_autovc_files_are_what_its_loader_reads(tmp_path):
    data.autovc(str(tmp_path), speakers=2, utterances=2, frames=40)
    meta = pickle.load(open(tmp_path / "train.pkl", "rb"))
    assert len(meta) == 2
    for speaker, embedding, *files in meta:
        assert embedding.shape == (256,) and abs(float(np.linalg.norm(embedding)) - 1) < 1e-5
        assert len(files) == 2 and all(f.startswith(speaker + "/") for f in files)
        for f in files:
            spect = np.load(tmp_path / f)
            assert spect.dtype == np.float32 and spect.shape[1] == 80 and spect.shape[0] >= 40
            assert 0 <= spect.min() and spect.max() <= 1


def test_data_is_the_same_on_every_run(tmp_path):
    data.wikitext(str(tmp_path / "a"))
    data.wikitext(str(tmp_path / "b"))
    assert (tmp_path / "a" / "train.txt").read_text() == (tmp_path / "b" / "train.txt").read_text()


def _script(**fields):
    base = dict(name="s", repo="nanoGPT", script="train.py", args=("--device", "cuda", "--cuda", "x={run}"),
                done=r"all done", what="w")
    return manifest.Script(**{**base, **fields})


def test_native_command_replaces_and_drops_cuda_arguments():
    script = _script(native={"replace": {"cuda": "cpu", "--cuda": None}, "args": ["--no-cuda"]})
    assert run.command(script, "native", "/src", "/r", "/v/bin/python") == [
        "/v/bin/python", "/src/train.py", "--device", "cpu", "x=/r", "--no-cuda"]
    assert run.command(script, "cpu", "/src", "/r", "/v/bin/python") == [
        "/v/bin/python", "/src/train.py", "--device", "cuda", "--cuda", "x=/r"]
    assert run.command(_script(native=None, why_not_native="nccl"), "native", "/src", "/r", "/p") is None
    torchrun = run.command(_script(launcher="torchrun"), "npu", "/src", "/r", "/v/bin/python")
    assert torchrun[:4] == ["/v/bin/torchrun", "--standalone", "--nproc_per_node", "2"]


def test_stand_in_targets_see_one_vendor_and_the_native_run_none():
    script = _script(native={"env": {"CUDA_VISIBLE_DEVICES": ""}})
    npu = run.environment(script, "npu", "/src", "/v/bin/python")
    assert npu["TRANSFER_DEVICE"] == "npu"
    assert sorted(os.listdir(npu["PYTHONPATH"])) == ["_sim_accel", "torch_npu"]
    native = run.environment(script, "native", "/src", "/v/bin/python")
    assert "TRANSFER_DEVICE" not in native and native["CUDA_VISIBLE_DEVICES"] == ""
    assert run.environment(script, "cpu", "/src", "/v/bin/python")["TRANSFER_DEVICE"] == "cpu"


def test_first_error_is_the_exception_that_ends_the_first_traceback():
    output = ("epoch 1\n  0%|  | 0/2 [00:00<?, ?it/s]Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n    f()\n"
              "ValueError: Expected a npu device, but got: cuda\nTraceback (most recent call last):\n"
              "RuntimeError: later\n")
    assert run.first_error(output) == "ValueError: Expected a npu device, but got: cuda"
    torchrun = ("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"t.py\", line 1\n"
                "[rank1]: ValueError: persistent_workers option needs num_workers > 0\nTraceback (most recent call "
                "last):\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n")
    assert run.first_error(torchrun) == "ValueError: persistent_workers option needs num_workers > 0"


def test_exit_zero_without_the_completion_sign_is_a_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "WORK", str(tmp_path))
    entry = tmp_path / "train.py"
    entry.write_text("print('loss 1.5')\n")
    script = _script(script="train.py", args=(), native={}, losses=r"loss [0-9.]+")
    outcome = run.run_one(script, "native", str(tmp_path), sys.executable)
    assert outcome["rc"] == 0 and outcome["status"] == "failed" and "no completion sign" in outcome["error"]
    entry.write_text("print('loss 1.5')\nprint('all done')\n")
    outcome = run.run_one(script, "native", str(tmp_path), sys.executable)
    assert outcome["status"] == "finished" and outcome["losses"] == ["loss 1.5"]


def test_rates_count_finished_runs_among_those_that_finish_natively(monkeypatch):
    a, b, c = (_script(name=n, seeded=True) for n in "abc")
    monkeypatch.setattr(manifest, "SCRIPTS", (a, b, c))
    runs = {"a/native": {"status": "finished", "losses": ["loss 1"]}, "a/cpu": {"status": "finished", "losses": ["loss 1"], "seconds": 1},
            "b/native": {"status": "finished", "losses": ["loss 2"]}, "b/cpu": {"status": "failed", "error": "E"},
            "c/native": {"status": "failed", "error": "bug"}, "c/cpu": {"status": "failed", "error": "bug"}}
    rates = run.rates(runs)
    assert rates["cpu"] == {"ran": 3, "finished": 1, "native_ok": 2, "finished_of_native_ok": 1}
    assert run.verdict(runs, a, "cpu") == {"state": "finished", "same": True, "seconds": 1}
    assert run.verdict(runs, b, "cpu")["kind"] == "unclassified"


def test_docs_wild_section_is_the_recorded_run_with_every_failure_classified():
    checked = subprocess.run([sys.executable, os.path.join(WILD, "run.py"), "--check"], capture_output=True,
                             text=True)
    assert checked.returncode == 0, checked.stderr
    record = json.load(open(os.path.join(ROOT, "docs", "results", "wild.json")))
    assert record["torch"] and {k.split("/")[1] for k in record["runs"]} >= {"native", "cpu", "npu"}

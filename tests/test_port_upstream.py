"""The trainers people copy, ported by `transfer port`, run natively on the vendor stand-ins.

Upstream copies (tests/scripts/upstream/, each folder with its license): nanoGPT's
train.py / model.py / configurator.py, llm.c's train_gpt2.py, and pytorch/examples'
DDP tutorial (multigpu_torchrun.py). Each is ported for a target, then run twice
on the same stand-in from the same seed: the ported copy natively (no transfer at
all: no TRANSFER_*, transfer not on the path, no banner) and the original CUDA
script under transfer. tests/scripts/upstream/probe.py runs both and prints, from
outside the script's code, where the parameters are, the process group's backend
and the autocast state at the first forward, and a digest of the parameters at
the end. The native run must select the target (parameters on the target's
devices, its backend, autocast on it) and reach the same losses and digests as
the original under transfer.

Tiny configurations (a few iterations of 2-layer models on token files the test
writes); llm.c's from-scratch ``d12`` row is shrunk in the copy to 2 layers of 64
(the code path is d12's: from scratch, GPT-2's vocabulary). One test per target,
its runs two at a time.

pytorch/examples' imagenet/main.py needs torchvision, whose wheels are CUDA builds
that load only beside a CUDA build of torch: its test runs in `nox -s standins` on
torch 2.14.1 and 2.15.0 (the noxfile installs the matching torchvision there) and is skipped
where torchvision is missing. ``--dummy`` (torchvision's FakeData, shrunk in the copy
to 16 + 8 images of 32x32) with resnet18, one process and ``--multiprocessing-distributed``
(torch.multiprocessing.spawn, one process per device), the latter also unported under
transfer (its torch.accelerator device is cuda to it, so its CUDA branches run).
"""

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import importlib.util

import numpy as np
import pytest
import torch

from conftest import (INSTALLED, ROOT, SCRIPTS, VENDORS, clean_env, free_port, needs_standins, no_gpu,
                      torchrun_standalone)

UPSTREAM = os.path.join(SCRIPTS, "upstream")
TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
PROBE = os.path.join(UPSTREAM, "probe.py")
NANOGPT_ARGS = ["--dataset=tiny", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=4",
                "--max_iters=4", "--eval_interval=2", "--eval_iters=2", "--log_interval=1", "--compile=False",
                "--out_dir=out"]
LLMC_ARGS = ["--input_bin", "{work}/tokens.bin", "--model", "d12", "--batch_size", "2", "--sequence_length", "16",
             "--total_batch_size", "32", "--num_iterations", "3", "--write_tensors", "0"]
LOSSES = {
    "nanogpt": r"iter \d+: loss [0-9.]+|step \d+: train loss [0-9.]+, val loss [0-9.]+",
    "llm_c": r"step +\d+/\d+ \| train loss [0-9.]+",
    "ddp_tutorial": r"\[GPU\d\] Epoch \d+ \| Batchsize: \d+ \| Steps: \d+",
}
PROBE_LINE = r"probe: rank (\d) parameters on (\S+) backend (\S+) autocast (\S+) (\S+)"
DIGEST = r"probe: rank (\d) digest (-?\d+\.\d{6})"
# (script folder, entry, launch, its arguments, expected autocast dtype or None: off)
CASES = {
    "nanogpt-bf16": ("nanogpt", "train.py", "python", NANOGPT_ARGS + ["--dtype=bfloat16"], "bfloat16"),
    "nanogpt-torchrun": ("nanogpt", "train.py", "torchrun",
                         NANOGPT_ARGS + ["--dtype=float32", "--gradient_accumulation_steps=2"], "float32"),
    "llm_c-bf16": ("llm_c", "train_gpt2.py", "python", LLMC_ARGS + ["--dtype", "bfloat16"], "bfloat16"),
    "ddp_tutorial-torchrun": ("ddp_tutorial", "multigpu_torchrun.py", "torchrun", ["2", "1", "--batch_size", "64"],
                              None),
}
TARGETS = {  # the cases each target runs (single process bf16 and torchrun fp32 cover both axes)
    "npu": ["nanogpt-bf16", "nanogpt-torchrun", "llm_c-bf16", "ddp_tutorial-torchrun"],
    "sdaa": ["nanogpt-torchrun"],  # tccl: set_device moved before init_process_group
    "gcu": ["llm_c-bf16"],
}
#: What the port leaves in these scripts, each with where its value comes from.
KEPT = {"nanogpt": {("model.py", "compare 'cuda'"): "`device_type` is a parameter of configure_optimizers()"}}


def _site(tmp_path, profile):
    site = tmp_path / f"site-{profile}"
    site.mkdir(exist_ok=True)
    for name in (f"torch_{profile}", "_sim_accel"):
        os.symlink(os.path.join(VENDORS, name), site / name)
    fake = site / "tiktoken.py"  # llm.c imports it for its tokenizer file only (--write_tensors 0: unused)
    fake.write_text("class _Encoding:\n    eot_token = max_token_value = 50256\n\n\n"
                    "def get_encoding(name):\n    return _Encoding()\n")
    return str(site)


def _copy(folder, where):
    shutil.copytree(os.path.join(UPSTREAM, folder), where)
    if folder == "nanogpt":  # a tiny token file and its vocabulary, where train.py reads them (data/<dataset>)
        data = os.path.join(where, "data", "tiny")
        os.makedirs(data)
        for split in ("train", "val"):
            (np.arange(4096) * 7 % 61).astype(np.uint16).tofile(os.path.join(data, f"{split}.bin"))
        import pickle

        with open(os.path.join(data, "meta.pkl"), "wb") as fh:
            pickle.dump({"vocab_size": 64}, fh)
    if folder == "llm_c":  # d12's row, shrunk: from scratch as d12, 2 layers of 64
        path = os.path.join(where, "train_gpt2.py")
        with open(path) as fh:
            text = fh.read()
        row = '"d12": GPTConfig(block_size=1024, vocab_size=50257, n_layer=12, n_head=12, n_embd=768)'
        assert row in text
        with open(path, "w") as fh:
            fh.write(text.replace(row, row.replace("n_layer=12, n_head=12, n_embd=768", "n_layer=2, n_head=2, n_embd=64")))


def _tokens(work):
    header = np.zeros(256, dtype=np.int32)
    tokens = (np.arange(4096) * 7 % 50257).astype(np.uint16)
    header[:3] = (20240520, 1, len(tokens))  # llm.c's token file: magic, version, count
    with open(os.path.join(work, "tokens.bin"), "wb") as fh:
        fh.write(header.tobytes() + tokens.tobytes())


def _port(tmp_path, profile):
    """Every upstream folder ported for `profile`: {folder: (original copy, ported copy, what was left)}."""
    from transfer.migrate import port_files

    out = {}
    for folder in sorted({CASES[case][0] for case in TARGETS[profile]}):
        original = str(tmp_path / f"{folder}-cuda")
        _copy(folder, original)
        ported = str(tmp_path / f"{folder}-{profile}")
        outcome = port_files.run([original], profile, out=ported, jobs=1, progress=False)
        shutil.copytree(os.path.join(original, "data"), os.path.join(ported, "data")) \
            if folder == "nanogpt" else None
        out[folder] = (original, ported, outcome.unsupported)
    return out


def _run(job):
    command, env, cwd = job
    proc = subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)
    return proc.returncode, proc.stdout


def _jobs(tmp_path, profile, site, ported):
    jobs = {}
    for case in TARGETS[profile]:
        folder, entry, launch, args, _ = CASES[case]
        original, copy, _ = ported[folder]
        for kind, where in (("native", copy), ("shim", original)):
            work = tmp_path / f"{case}-{kind}"
            work.mkdir()
            _tokens(str(work))
            argv = [a.format(work=work) for a in args]
            if kind == "native":  # no TRANSFER_* and transfer not on the path: the vendor plug-in alone
                env = clean_env(PYTHONPATH=site, SIM_ACCEL_DEVICE_COUNT="2", **no_gpu(profile))
            else:
                env = clean_env(PYTHONPATH=os.pathsep.join([site] + ([] if INSTALLED else [ROOT])),
                                TRANSFER_DEVICE=profile, SIM_ACCEL_DEVICE_COUNT="2", **no_gpu(profile))
            runner = [sys.executable] + (torchrun_standalone(2) if launch == "torchrun" else [])
            cwd = str(work)
            if folder == "nanogpt":  # train.py reads configurator.py and data/ from the current folder
                cwd = os.path.join(str(work), "src")
                shutil.copytree(where, cwd)
                script = os.path.join(cwd, entry)
            else:
                script = os.path.join(where, entry)
            jobs[(case, kind)] = (runner + [PROBE, script] + argv, env, cwd)
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(jobs, pool.map(_run, jobs.values())))
    return results


def _check(profile, case, native, shim, unsupported):
    from transfer.profiles import PROFILES

    folder, _, launch, _, amp = CASES[case]
    for kind, (code, out) in (("native", native), ("shim", shim)):
        assert code == 0, (case, kind, out[-4000:])
    assert "transfer:" not in native[1] and "transfer: CUDA calls run on" in shim[1], native[1][-2000:]
    probes = sorted(set(re.findall(PROBE_LINE, native[1])))
    ranks = 2 if launch == "torchrun" else 1
    backend = PROFILES[profile].backend if launch == "torchrun" else "none"
    expected = [(str(r), f"{profile}:{r}", backend, profile if amp else "off", amp or "-") for r in range(ranks)]
    assert probes == expected, (case, native[1][-3000:])
    assert sorted(set(re.findall(PROBE_LINE, shim[1]))) == expected, (case, shim[1][-3000:])
    losses = [re.findall(LOSSES[folder], out) for _, out in (native, shim)]
    digests = [sorted(re.findall(DIGEST, out)) for _, out in (native, shim)]
    assert losses[0] and sorted(losses[0]) == sorted(losses[1]), (case, losses)
    assert len(digests[0]) == ranks and digests[0] == digests[1], (case, digests)
    assert len({d for _, d in digests[0]}) == 1  # every rank ends with the same weights
    kept = {(os.path.basename(row[0]), row[3]): row[4] for row in unsupported}
    want = KEPT.get(folder, {})
    assert set(kept) == set(want), kept
    for key, reason in want.items():
        assert reason in kept[key], kept[key]


@needs_standins
@pytest.mark.standins  # nox -s standins: the public trainers on every stand-in, on the oldest and newest torch
@pytest.mark.parametrize("profile", list(TARGETS))
def test_ported_upstream_trainers_run_natively_as_the_original_under_transfer(tmp_path, profile):
    """nanoGPT (single process fp32 and bf16, torchrun), llm.c's train_gpt2.py (bf16) and the DDP tutorial,
    ported: natively on the stand-in they select the target and reach the original's losses and weights."""
    if TORCH < (2, 3):  # the oldest torch of the standins tier is 2.1.2: as on CUDA, the scripts fail there
        pytest.skip(f"nanoGPT's train.py makes a torch.amp.GradScaler (torch >= 2.3) and llm.c's train_gpt2.py calls "
                    f"nn.init.normal_(generator=) (torch >= 2.2): on torch {torch.__version__} they fail natively")
    if "ddp_tutorial-torchrun" in TARGETS[profile] and not hasattr(torch, "accelerator"):
        pytest.skip(f"the DDP tutorial moves its model with .to(<an index>), which torch {torch.__version__} reads "
                    "as a CUDA index (torch >= 2.6 reads it as the current accelerator's)")
    site = _site(tmp_path, profile)
    ported = _port(tmp_path, profile)
    results = _jobs(tmp_path, profile, site, ported)
    for case in TARGETS[profile]:
        _check(profile, case, results[(case, "native")], results[(case, "shim")], ported[CASES[case][0]][2])
    again = {}
    for folder, (_, copy, _) in ported.items():  # a second port of a ported tree changes nothing
        from transfer.migrate import port_files

        again[folder] = port_files.run([copy], profile, diff=open(os.devnull, "w"), jobs=1, progress=False)
        assert not again[folder].transformed, (folder, again[folder].transformed)


IMAGENET_ARGS = ["--dummy", "--epochs", "1", "-b", "8", "-j", "0", "-p", "1"]
IMAGENET_LOSSES = r"((?:Epoch: \[\d+\]|Test: )\[ *\d+/\d+\])\tTime [^\t]+\t(?:Data [^\t]+\t)?Loss (\S+)"
#: The FakeData rows of --dummy (ImageNet's sizes), shrunk in the copy.
IMAGENET_DATA = {"FakeData(1281167, (3, 224, 224), 1000,": "FakeData(16, (3, 32, 32), 10,",
                 "FakeData(50000, (3, 224, 224), 1000,": "FakeData(8, (3, 32, 32), 10,"}


@needs_standins
@pytest.mark.standins
@pytest.mark.skipif(not hasattr(torch, "accelerator"), reason=f"imagenet/main.py selects its device with "
                    f"torch.accelerator, which torch {torch.__version__} lacks (torch >= 2.6)")
@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="torchvision is not installed: its "
                    "wheels load only beside a CUDA build of torch (`nox -s standins` installs it on torch 2.14.1 and 2.15.0)")
def test_ported_imagenet_runs_natively_as_the_original_under_transfer(tmp_path):
    """pytorch/examples imagenet/main.py, ported for npu: one process on one npu natively reaches the original's
    losses and weights under transfer; --multiprocessing-distributed natively runs one process per npu over hccl, and so
    does the original under transfer, to the same weights."""
    from transfer.migrate import port_files

    original, ported = str(tmp_path / "imagenet-cuda"), str(tmp_path / "imagenet-npu")
    shutil.copytree(os.path.join(UPSTREAM, "imagenet"), original)
    path = os.path.join(original, "main.py")
    with open(path) as fh:
        text = fh.read()
    for row, small in IMAGENET_DATA.items():
        assert row in text
        text = text.replace(row, small)
    with open(path, "w") as fh:
        fh.write(text)
    outcome = port_files.run([original], "npu", out=ported, jobs=1, progress=False)
    kept = sorted((row[1], row[3]) for row in outcome.unsupported)
    assert [api for _, api in kept] == ["compare 'cuda'", "torch.nn.DataParallel", "torch.nn.DataParallel"], kept
    site = _site(tmp_path, "npu")
    native_env = clean_env(PYTHONPATH=site, SIM_ACCEL_DEVICE_COUNT="2", **no_gpu("npu"))
    shim_env = clean_env(PYTHONPATH=os.pathsep.join([site] + ([] if INSTALLED else [ROOT])), TRANSFER_DEVICE="npu",
                         SIM_ACCEL_DEVICE_COUNT="2", **no_gpu("npu"))
    def spawn():
        return ["--multiprocessing-distributed", "--world-size", "1", "--rank", "0",
                "--dist-url", f"tcp://127.0.0.1:{free_port()}"]

    # One process sees one device, as on a one-GPU machine: there the original's nn.DataParallel (its branch for
    # device.type == 'cuda') is the module itself, as on CUDA; with two it splits each batch over both (BatchNorm per
    # chunk: other losses, as on two GPUs), which the ported copy, left on one device, does not.
    one_device = {"SIM_ACCEL_DEVICE_COUNT": "1"}
    jobs = {}
    for kind, env, where, extra in (("native", {**native_env, **one_device}, ported, []),
                                    ("shim", {**shim_env, **one_device}, original, []),
                                    ("native-spawn", native_env, ported, spawn()),
                                    ("shim-spawn", shim_env, original, spawn())):
        work = tmp_path / kind
        work.mkdir()
        jobs[kind] = ([sys.executable, PROBE, os.path.join(where, "main.py"), *IMAGENET_ARGS, *extra], env, str(work))
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(jobs, pool.map(_run, jobs.values())))
    for kind, (code, out) in results.items():
        assert code == 0, (kind, out[-4000:])
        assert ("transfer: CUDA calls run on" in out) == kind.startswith("shim"), (kind, out[-2000:])
    native, shim = results["native"][1], results["shim"][1]
    one = [("0", "npu:0", "none", "off", "-")]
    assert sorted(set(re.findall(PROBE_LINE, native))) == one, native[-3000:]
    assert sorted(set(re.findall(PROBE_LINE, shim))) == one, shim[-3000:]
    losses = [re.findall(IMAGENET_LOSSES, out) for out in (native, shim)]
    assert len(losses[0]) == 3 and losses[0] == losses[1], losses  # 2 training steps, 1 validation step
    digests = [re.findall(DIGEST, out) for out in (native, shim)]
    assert len(digests[0]) == 1 and digests[0] == digests[1], digests
    # The original asks torch.accelerator for its device and takes its `device.type == 'cuda'` branches (set_device,
    # model.cuda, DDP with device_ids) under transfer as on CUDA: the same processes, devices, backend and weights
    # as the ported copy natively.
    spawned = {}
    for kind in ("native-spawn", "shim-spawn"):
        out = results[kind][1]
        assert sorted(set(re.findall(PROBE_LINE, out))) == [(str(r), f"npu:{r}", "hccl", "off", "-") for r in (0, 1)], \
            (kind, out[-3000:])
        spawned[kind] = sorted(re.findall(DIGEST, out))
        assert [r for r, _ in spawned[kind]] == ["0", "1"] and len({d for _, d in spawned[kind]}) == 1, spawned
    assert "Using device: cuda" in results["shim-spawn"][1], results["shim-spawn"][1][-3000:]
    assert spawned["shim-spawn"] == spawned["native-spawn"], spawned

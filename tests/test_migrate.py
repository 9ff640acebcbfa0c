"""transfer scan / port / docs: known answers on fixtures, the CLI contract, and
ported examples running natively on a vendor stand-in."""

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import (EXAMPLES, INSTALLED, ROOT, SCRIPTS, VENDORS, clean_env, free_port, needs_standins,
                      no_gpu, TORCH_RELEASE)

FIXTURES = os.path.join(ROOT, "tests", "migrate_fixtures")
PUBLIC = os.path.join(FIXTURES, "public_style")  # written the way public repositories write these idioms


def cli(*args, cwd=None, check=True):
    env = clean_env()
    if not INSTALLED:
        env["PYTHONPATH"] = ROOT
    proc = subprocess.run([sys.executable, "-m", "transfer.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode in (0, 1), proc.stderr
    return proc


def test_scan_known_answers_aliases_fstrings_compares():
    from transfer.migrate import scan_files

    result = scan_files.run([os.path.join(FIXTURES, "aliases.py")], ["npu"])
    found = [(f.line, f.api) for f in result.findings]
    assert found == [
        (7, "torch.cuda.synchronize"), (8, "torch.cuda.empty_cache"), (9, "torch.cuda.amp.autocast"),
        (12, "device='cuda'"), (13, "device='cuda'"), (15, "compare 'cuda'"),
        (17, "torch.distributed.init_process_group"), (17, "backend='nccl'"),
        (18, "torch.distributed.get_backend"), (18, "compare 'nccl'"),
        (20, "torch.cuda.get_device_capability"), (21, "torch.cuda.CUDAGraph"),
    ]  # line 14, a checkpoint path containing "cuda", is not a device
    classes = {f.api: result.status(f)["npu"].cls for f in result.findings}
    assert classes["compare 'cuda'"] == "unsupported"
    assert classes["torch.cuda.CUDAGraph"] == "translated"  # torch_npu's NPUGraph
    assert classes["torch.cuda.get_device_capability"] == "placeholder"


def test_scan_names_the_row_of_each_device_taking_call():
    from transfer.migrate import scan

    src = ("import torch\nfrom torch.utils.data import DataLoader\ntorch.set_default_device('cuda')\n"
           "g = torch.Generator(device='cuda:1')\nd = torch.device('cuda', 0)\nx = torch.ones(2, device='cuda')\n"
           "dl = DataLoader([1], pin_memory=True)\nquiet = DataLoader([1], pin_memory=False)\n")
    assert [(f.line, f.api) for f in scan.scan_source(src)] == [
        (3, "torch.set_default_device('cuda')"), (4, "torch.Generator('cuda')"), (5, "torch.device('cuda')"),
        (6, "device='cuda'"), (7, "DataLoader(pin_memory=True)")]


CUDA_METHODS = """import torch
import torch.nn as nn
from torch import nn as tnn


class MLP(nn.Module):
    pass


class Deeper(MLP):
    pass


class Plain:
    pass


model = MLP().cuda()
deeper = Deeper().cuda()
loss = tnn.CrossEntropyLoss().cuda()
x = torch.randn(2, 4).cuda()
other = Plain().cuda()
y = x.cuda()
weight = nn.Parameter(torch.zeros(2)).cuda()
"""


def test_scan_labels_cuda_by_what_the_receiver_is_known_to_be():
    """`MLP().cuda()` (a Module) was once labelled Tensor.cuda. A module built right there (a torch.nn class,
    or a class of the file that subclasses one) is Module.cuda, a torch factory's result Tensor.cuda, and a
    receiver whose type only running the code shows (a name, another class) `.cuda()`; port rewrites all three."""
    from transfer.migrate import port, scan

    found = [(f.line, f.api) for f in scan.scan_source(CUDA_METHODS)]
    assert found == [(18, "Module.cuda"), (19, "Module.cuda"), (20, "Module.cuda"), (21, "Tensor.cuda"),
                     (22, ".cuda()"), (23, ".cuda()"), (24, ".cuda()")]
    ported = port.port_source(CUDA_METHODS, "npu")
    assert ported.text.count(".npu()") == 7 and ".cuda(" not in ported.text
    assert [c.operation for c in ported.changes].count("MODIFY") == 7


def test_port_lists_what_it_leaves_with_line_reason_and_native_spelling(tmp_path):
    """`port --diff` once said "1 left for a person" and no more, and the CSV explained transfer's placeholder
    for get_device_capability, not what code running without transfer should use. Every use left for a person is
    listed under the summary (file:line, why, what to write natively), with --diff and without."""
    script = tmp_path / "train.py"
    script.write_text("import torch\n\nmodel = torch.nn.Linear(2, 2).cuda()\nmajor, minor = "
                      "torch.cuda.get_device_capability()\nuse_bf16 = major >= 8\nprint(torch.cuda.temperature())\n")
    diff = cli("port", str(script), "--device", "npu", "--diff")
    assert "+model = torch.nn.Linear(2, 2).npu()" in diff.stdout
    listed = [line.strip() for line in diff.stderr.splitlines() if line.startswith("  ")]
    assert len(listed) == 2 and "2 left for a person" in diff.stderr, diff.stderr
    capability, temperature = listed
    assert capability.startswith(f"{script}:4: torch.cuda.get_device_capability is kept and fails without "
                                 "transfer"), capability
    assert "`(8, 0) if torch.npu.is_bf16_supported() else (7, 0)`" in capability
    assert "torch.npu.get_device_capability() returns None" in capability  # why not the vendor's own
    assert temperature.startswith(f"{script}:6: torch.cuda.temperature: unsupported on npu") and \
        "remove it" in temperature
    out = cli("port", str(script), "--device", "gcu", "--out", str(tmp_path / "gcu"))
    with open(tmp_path / "gcu" / "unsupported_api.csv") as fh:
        rows = list(csv.reader(fh))[1:]
    assert [(r[1], r[3]) for r in rows] == [("4", "torch.cuda.get_device_capability"), ("6", "torch.cuda.temperature")]
    assert "`(8, 0) if torch.gcu.is_bf16_supported() else (7, 0)`" in rows[0][4] and "Enflame's numbering" in rows[0][4]
    assert [line.strip() for line in out.stderr.splitlines() if line.startswith("  ")] == \
        [f"{r[0]}:{r[1]}: " + r[4] if r[4].startswith(r[3]) else f"{r[0]}:{r[1]}: {r[3]}: {r[4]}" for r in rows]


@pytest.mark.slow
@needs_standins
def test_the_native_spelling_port_suggests_runs_where_the_kept_call_fails(tmp_path):
    """What port suggests for get_device_capability runs on the vendor without transfer; the call it keeps
    does not (the npu stand-in, no GPU, no transfer)."""
    from transfer import support

    suggested = re.search(r"`([^`]+)`", support.native_spelling("npu", "torch.cuda.get_device_capability")).group(1)
    code = (f"import torch, torch_npu\nprint('suggested', {suggested})\n"
            "try:\n    torch.cuda.get_device_capability()\nexcept Exception as exc:\n    print('kept fails', "
            "type(exc).__name__)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(PYTHONPATH=_site(tmp_path, "npu"),
                                                                      **no_gpu("npu")),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^suggested \((8|7), 0\)$", proc.stdout, re.MULTILINE), proc.stdout + proc.stderr
    assert "kept fails" in proc.stdout, proc.stdout


def test_scan_tree_gbk_and_unparsable_files():
    from transfer.migrate import scan_files

    result = scan_files.run([FIXTURES], ["sdaa"])
    assert [f["file"] for f in result.failed] == [os.path.join(FIXTURES, "tree", "broken.py")]
    apis = {(os.path.basename(f.file), f.api) for f in result.findings}
    assert ("gbk_declared.py", "torch.cuda.synchronize") in apis  # declared coding: gbk
    assert ("gbk_undeclared.py", "Module.cuda") in apis  # undeclared, not UTF-8: read as GB18030
    assert {("unsupported.py", a) for a in ("apex.*", "torch.nn.DataParallel", "Tensor.is_cuda",
                                            "torch.utils.cpp_extension.CUDAExtension")} <= apis


def test_scan_cli_strict_exit_code_and_csv_columns():
    clean = cli("scan", os.path.join(FIXTURES, "gbk_declared.py"), "--strict")
    assert clean.returncode == 0, clean.stderr
    dirty = cli("scan", os.path.join(FIXTURES, "tree"), "--strict", "--device", "npu", "--format", "csv")
    assert dirty.returncode == 1
    rows = list(csv.reader(io.StringIO(dirty.stdout)))
    assert rows[0][:6] == ["File", "Start Line", "End Line", "API", "Status", "Message"]
    assert any(r[3] == "apex.*" and r[4] == "unsupported" for r in rows[1:])  # apex.contrib: not provided
    assert any(r[0].endswith("broken.py") and r[4] == "skipped" for r in rows[1:])
    as_json = json.loads(cli("scan", os.path.join(FIXTURES, "aliases.py"), "--format", "json").stdout)
    from transfer.profiles import PROFILES
    assert as_json["profiles"] == list(PROFILES)
    assert as_json["findings"][0]["status"]["sdaa"]["to"] == "torch.sdaa.synchronize"
    missing = cli("scan", os.path.join(FIXTURES, "nope.py"), check=False)
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_scan_never_imports_torch_or_the_patches():
    code = ("import sys; from transfer import cli; cli.main(['scan', %r, '--format', 'json']); "
            "cli.main(['port', %r, '--device', 'npu', '--diff']); "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'transfer.patches', 'libcst'))]; "
            "assert not bad, bad" % (FIXTURES, PUBLIC))
    env = clean_env(TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    if not INSTALLED:
        env["PYTHONPATH"] = ROOT
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_docs_support_matrix_is_current():
    from transfer.migrate import docs

    path = os.path.join(ROOT, "docs", "support-matrix.md")
    with open(path, encoding="utf-8") as fh:
        assert fh.read() == docs.render(), "docs/support-matrix.md is stale: run python -m transfer.migrate.docs"
    assert docs.main(["--check", "--output", path]) == 0
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:  # README's table of targets: every profile
        readme = fh.read()
    assert readme == docs.readme(readme) and docs.README_BEGIN in readme, "README.md's targets: run python -m transfer.migrate.docs"
    from transfer.profiles import PROFILES
    assert all(f"| `{name}` | {p.vendor} |" in readme for name, p in PROFILES.items())


def test_scan_without_a_device_is_one_short_line_per_finding():
    """Without --device each finding once was a ~300-character line naming all four targets. Now the class
    once for all, or per group of targets; what each becomes is --device's (or the CSV's)."""
    text = cli("scan", os.path.join(EXAMPLES, "train_cuda.py")).stdout.splitlines()
    findings = [line for line in text if line.startswith(os.path.join(EXAMPLES, "train_cuda.py"))]
    assert len(findings) > 20 and max(len(line) - len(EXAMPLES) for line in findings) < 120, text
    assert any(line.endswith("torch.cuda.synchronize: translated") for line in findings), text
    from transfer.profiles import PROFILES
    assert any(line.endswith(f"torch.cuda.max_memory_allocated: placeholder (cpu), translated (the other "
                             f"{len(PROFILES) - 1})") for line in findings), text
    assert text[-1] == "what each becomes, and why: transfer scan --device TARGET (or --format csv)"


def test_docs_writes_only_into_a_checkout_or_where_told(tmp_path):
    """`transfer docs` once wrote ./docs/support-matrix.md into whatever directory it ran in.
    It is a maintainer's command: elsewhere it refuses and says so; --output says where (with help)."""
    refused = cli("docs", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and "not a transfer checkout" in refused.stderr and "--output" in refused.stderr
    assert os.listdir(tmp_path) == []
    written = cli("docs", "--output", str(tmp_path / "matrix.md"), cwd=tmp_path)
    assert written.returncode == 0 and os.listdir(tmp_path) == ["matrix.md"]
    helped = cli("docs", "--help", cwd=tmp_path).stdout
    assert re.search(r"--output FILE, -o FILE\s+the file to write", helped) or \
        re.search(r"-o FILE, --output FILE\s+the file to write", helped) or \
        re.search(r"--output, -o FILE\s+the file to write", helped), helped  # argparse of Python >= 3.13
    overview = cli("--help", cwd=tmp_path).stdout
    assert "(maintainers)" in overview and "transfer-run" in overview and "TRANSFER_DEVICE" in overview
    assert "TRANSFER_LOG" in overview and "--version" in overview
    assert cli("--version").stdout.startswith("transfer ")


def test_port_safe_unsafe_idempotent_and_comments_kept():
    from transfer.migrate.port import port_source

    src = ("import torch\n\n# keep me\nx = torch.zeros(2).cuda()  # and me\nif opts.device == 'cuda':\n"
           "    torch.cuda.synchronize()\nd = 'cuda'\ny = x.cuda(rank)\n")
    safe = port_source(src, "sdaa")
    assert safe.text == ("import torch\nimport torch_sdaa  # registers torch.sdaa\n\n# keep me\n"
                         "x = torch.zeros(2).sdaa()  # and me\nif opts.device == 'cuda':\n"
                         "    torch.sdaa.synchronize()\nd = 'cuda'\ny = x.sdaa(rank)\n")
    assert safe.unsafe_skipped == 2  # d = 'cuda' reaches no device argument; the comparison (an attribute)
    unsafe = port_source(src, "sdaa", unsafe=True)
    assert "if opts.device in ('cuda', \"sdaa\"):" in unsafe.text
    assert "d = 'sdaa'" in unsafe.text and "y = x.sdaa(rank)" in unsafe.text
    # an index keeps .cuda()'s meaning through the vendor's method; a device goes through .to (torch_npu's
    # Module.npu takes an index only)
    assert port_source("m.cuda(self.device)\nm.cuda(args.gpu)\n", "gcu").text == \
        'import torch_gcu  # registers torch.gcu\nm.to(self.device)\nm.gcu(args.gpu)\n'
    for first, flag in ((safe, False), (unsafe, True)):
        again = port_source(first.text, "sdaa", unsafe=flag)
        assert again.text == first.text and not [c for c in again.changes if c.operation != "UNSUPPORTED"]
    with pytest.raises(ValueError, match="TRANSFER_DEVICE=cpu"):
        port_source(src, "cpu")


def test_port_diff_applies_with_patch_and_second_run_is_a_noop(tmp_path):
    if shutil.which("patch") is None:
        pytest.fail("the `patch` program is needed for this test")
    for name in ("a", "b"):
        shutil.copytree(EXAMPLES, tmp_path / name / "examples")
    diff = cli("port", "examples", "--device", "npu", "--diff", cwd=tmp_path / "a")
    assert diff.returncode == 0 and diff.stdout.startswith("--- a/examples/")
    applied = subprocess.run(["patch", "-p1"], input=diff.stdout, cwd=tmp_path / "a", capture_output=True, text=True)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    out = cli("port", "examples", "--device", "npu", "--out", str(tmp_path / "out"), cwd=tmp_path / "b")
    assert "Transformed 4 / Skipped 0 / Failed 0" in out.stderr
    for name in os.listdir(EXAMPLES):
        if name.endswith(".py"):
            assert (tmp_path / "a" / "examples" / name).read_text() == (tmp_path / "out" / name).read_text()
    with open(tmp_path / "out" / "change_list.csv") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["File", "Start Line", "End Line", "Operation", "Message"]
    assert {r[3] for r in rows[1:]} == {"INSERT", "MODIFY", "UNSUPPORTED"}
    again = cli("port", str(tmp_path / "out"), "--device", "npu", "--in-place", cwd=tmp_path)
    assert "Transformed 0 / Skipped 4 / Failed 0" in again.stderr, again.stderr
    broken = cli("port", os.path.join(FIXTURES, "tree"), "--device", "npu", "--out", str(tmp_path / "o2"), check=False)
    assert broken.returncode == 1 and "broken.py: skipped" in broken.stderr
    assert (tmp_path / "o2" / "broken.py").exists()  # copied unchanged


def _site(tmp_path, profile):
    site = tmp_path / f"site-{profile}"
    site.mkdir(exist_ok=True)
    for name in (f"torch_{profile}", "_sim_accel"):
        if not (site / name).exists():
            os.symlink(os.path.join(VENDORS, name), site / name)
    return str(site)


RANKS = r"rank \d: parameters \w+ on \w+:\d"  # exact: ranks share one pipe, lines may interleave
# (profile, script, port options, launch: how the CUDA original is started, its arguments, what must match)
NATIVE_CASES = {
    "train_cuda": ("gcu", os.path.join(EXAMPLES, "train_cuda.py"), [], "python",
                   ["--epochs", "1", "--workdir", "{work}"], r"epoch 0: loss [0-9.]+"),
    "spawn_ddp": ("sdaa", os.path.join(EXAMPLES, "spawn_ddp.py"), ["--unsafe"], "python",
                  ["--workdir", "{work}", "--port", "{port}"], RANKS + r"|final losses: \[[^\]]*\]"),
    "ddp_syncbn": ("npu", os.path.join(EXAMPLES, "ddp_syncbn.py"), [], "torchrun",
                   ["--out", "{work}/final.pt"], RANKS + r"|step \d+: mean loss [0-9.]+\d"),
    "seed002_mmengine_like": ("gcu", os.path.join(SCRIPTS, "mmengine_like.py"), ["--unsafe"], "torchrun",
                              ["--work-dir", "{work}"], RANKS + r"|Iter \[\d+/\d+\] loss: [0-9.]+\d"),
    "seed003_mnist_ddp": ("sdaa", os.path.join(SCRIPTS, "seed003_mnist_ddp.py"), [], "torchrun",
                          ["--log-dir", "{work}"], RANKS + r"|\[epoch \d+\] loss: [0-9.]+ accuracy: [0-9.]+\d"),
    # .cuda(args.gpu) and a --dist-backend default, safely (no --unsafe)
    "ddp_gpu_arg": ("npu", os.path.join(PUBLIC, "ddp_gpu_arg.py"), [], "torchrun", [],
                    RANKS + r"|epoch \d+: mean loss [0-9.]+\d"),
    # the device chosen once (torch.device(... if is_available() else ...), a --device default, parameter
    # defaults, comparisons with it), safely
    "device_idioms": ("gcu", os.path.join(PUBLIC, "device_idioms.py"), [], "python", ["--steps", "30"],
                      r"step \d+: loss [0-9.]+\d|eval loss [0-9.]+\d|parameters on \w+|using device: \w+"),
}


# On torch 2.1 an integer device is CUDA's: spawn_ddp.py's `model.to(rank)`, which the port leaves (docs/limits.md)
_INT_DEVICE_IS_CUDA = TORCH_RELEASE < (2, 2)
_NATIVE_PARAMS = [pytest.param(case, marks=pytest.mark.xfail(
    case == "spawn_ddp" and _INT_DEVICE_IS_CUDA, strict=True,
    reason="the port leaves model.to(rank); on torch 2.1 an integer device is CUDA (docs/limits.md)"))
    for case in NATIVE_CASES]


@needs_standins
@pytest.mark.parametrize("case", _NATIVE_PARAMS)
def test_ported_script_runs_natively_with_the_results_of_the_original(tmp_path, case):
    """The ported copy, started by the launch script port wrote, runs on the stand-in without transfer
    and prints what the CUDA original prints under transfer: losses, and every rank's parameter digest."""
    profile, script, options, launch, args, pattern = NATIVE_CASES[case]
    if case == "train_cuda" and not hasattr(torch.amp, "GradScaler"):
        pytest.skip(f"the port writes torch.amp.GradScaler, which torch {torch.__version__} lacks (2.3+)")
    out = tmp_path / "ported"
    cli("port", script, "--device", profile, "--out", str(out), "--main", script, *options)
    launcher = out / f"run_distributed_{profile}.sh"
    site = _site(tmp_path, profile)
    runs = {}
    for kind in ("native", "shim"):
        work = tmp_path / kind
        work.mkdir()
        port = free_port()
        argv = [a.format(work=work, port=port) for a in args]
        if kind == "native":  # no TRANSFER_* at all, and no banner below: transfer stays out of it
            env = clean_env(PYTHONPATH=site, PYTHON=sys.executable, NPROC="2", MASTER_PORT=port,
                            SIM_ACCEL_DEVICE_COUNT="2", **no_gpu(profile))
            command = ["sh", str(launcher), *argv]
        else:
            env = clean_env(PYTHONPATH=os.pathsep.join([site] + ([] if INSTALLED else [ROOT])),
                            TRANSFER_DEVICE=profile, SIM_ACCEL_DEVICE_COUNT="2", **no_gpu(profile))
            command = [sys.executable, script, *argv] if launch == "python" else \
                [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}",
                 script, *argv]
        runs[kind] = subprocess.Popen(command, env=env, cwd=work, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
    outputs = {kind: proc.communicate(timeout=600)[0] for kind, proc in runs.items()}
    for kind, proc in runs.items():
        assert proc.returncode == 0, (kind, outputs[kind])
    assert "transfer: CUDA calls run on" in outputs["shim"] and "transfer:" not in outputs["native"]
    native, shimmed = (sorted(re.findall(pattern, outputs[k])) for k in ("native", "shim"))
    assert native and native == shimmed, outputs
    if launch == "torchrun" or "spawn" in case:
        ranks = re.findall(RANKS, outputs["native"])
        assert sorted(r.split()[-1] for r in ranks) == [f"{profile}:0", f"{profile}:1"], outputs["native"]
        assert len({r.split()[3] for r in ranks}) == 1  # every rank finished with the same weights
    with open(out / "unsupported_api.csv") as fh:
        assert list(csv.reader(fh))[1:] == []  # nothing was left for a person in these scripts
    again = cli("port", str(out), "--device", profile, "--in-place", *options, cwd=tmp_path)
    assert "Transformed 0 / Skipped 1 / Failed 0" in again.stderr, again.stderr  # a second run is a no-op


@needs_standins
def test_port_reports_dataparallel_as_the_line_that_fails_natively(tmp_path):
    """What port leaves for a person is what breaks without transfer: nn.DataParallel scatters with
    CUDA-only C++. The shim runs the original on one device; the ported copy fails at that module."""
    script = os.path.join(EXAMPLES, "data_parallel.py")
    out = tmp_path / "ported"
    result = cli("port", script, "--device", "npu", "--out", str(out))
    assert "1 left for a person" in result.stderr, result.stderr
    with open(out / "unsupported_api.csv") as fh:
        rows = list(csv.reader(fh))
    line = next(i for i, text in enumerate(open(script), 1) if "nn.DataParallel(" in text)
    assert rows[1:] == [[script, str(line), str(line), "torch.nn.DataParallel", rows[1][4]]]
    assert "DistributedDataParallel" in rows[1][4]
    site = _site(tmp_path, "npu")
    # An Ascend machine: no GPU (with one, DataParallel would take CUDA's devices instead of failing at scatter).
    native = subprocess.run([sys.executable, str(out / "data_parallel.py"), "--workdir", str(tmp_path / "n")],
                            env=clean_env(PYTHONPATH=site, SIM_ACCEL_DEVICE_COUNT="2", **no_gpu("npu")),
                            capture_output=True, text=True, timeout=300)
    assert native.returncode != 0 and "scatter" in native.stderr, native.stderr
    shim = subprocess.run([sys.executable, script, "--workdir", str(tmp_path / "s")], capture_output=True, text=True,
                          env=clean_env(PYTHONPATH=os.pathsep.join([site] + ([] if INSTALLED else [ROOT])),
                                        TRANSFER_DEVICE="npu", TRANSFER_QUIET="1", SIM_ACCEL_DEVICE_COUNT="2",
                                        **no_gpu("npu")),
                          timeout=300)
    assert shim.returncode == 0 and re.search(r"parameters \w+ on npu:0", shim.stdout), shim.stdout + shim.stderr


def test_port_of_seed000_is_a_noop_it_is_sdaa_native_already(tmp_path):
    script = os.path.join(SCRIPTS, "seed000_sdaa_syncbn_demo.py")
    result = cli("port", script, "--device", "sdaa", "--out", str(tmp_path / "out"))
    assert "Transformed 0 / Skipped 1 / Failed 0" in result.stderr, result.stderr
    assert (tmp_path / "out" / os.path.basename(script)).read_text() == open(script, encoding="utf-8").read()


def test_launch_script_modes_and_carried_settings(tmp_path):
    from transfer.migrate import launch

    assert launch.mode(open(os.path.join(EXAMPLES, "spawn_ddp.py")).read()) == launch.SPAWN
    assert launch.mode(open(os.path.join(EXAMPLES, "ddp_syncbn.py")).read()) == launch.TORCHRUN
    assert launch.mode(open(os.path.join(EXAMPLES, "train_cuda.py")).read()) == launch.SINGLE
    text = launch.render("npu", "train.py", "import torch.distributed as d\nd.init_process_group('hccl')\n")
    script = tmp_path / "run.sh"
    script.write_text(text)
    fake = tmp_path / "python"  # stands for the interpreter: prints what it was started with
    fake.write_text('#!/bin/sh\necho "argv: $*"\necho "visible=$ASCEND_RT_VISIBLE_DEVICES buff=$HCCL_BUFFSIZE '
                    'ifname=$HCCL_SOCKET_IFNAME"\n')
    fake.chmod(0o755)
    env = clean_env(PYTHON=str(fake), NPROC="3", CUDA_VISIBLE_DEVICES="2,3,5", NCCL_BUFFSIZE="4194304",
                    NCCL_SOCKET_IFNAME="eth1")
    ran = subprocess.run(["sh", str(script), "--lr", "0.1"], env=env, capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0, ran.stderr
    assert f"--nproc_per_node=3 --nnodes=1 --node_rank=0 --master_addr=127.0.0.1 --master_port=29500 " \
           f"{tmp_path}/train.py --lr 0.1" in ran.stdout
    assert "visible=2,3,5 buff=4 ifname=eth1" in ran.stdout  # bytes -> MB, as HCCL_BUFFSIZE counts
    env["ASCEND_RT_VISIBLE_DEVICES"] = "0"  # the vendor's own setting wins
    assert "visible=0 " in subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True).stdout
    assert "transfer" not in text.split("\n", 2)[2]  # beyond the header, the launcher never mentions transfer


def test_port_main_must_be_ported_and_not_with_diff(tmp_path):
    outside = cli("port", os.path.join(EXAMPLES, "train_cuda.py"), "--device", "npu", "--main",
                  os.path.join(SCRIPTS, "mmengine_like.py"), "--out", str(tmp_path / "o"), check=False)
    assert outside.returncode == 2 and "not among the files being ported" in outside.stderr
    with_diff = cli("port", EXAMPLES, "--device", "npu", "--diff", "--main", os.path.join(EXAMPLES, "train_cuda.py"),
                    check=False)
    assert with_diff.returncode == 2 and "--diff writes nothing" in with_diff.stderr
    broken = os.path.join(FIXTURES, "tree", "broken.py")
    unparsable = cli("port", broken, "--device", "npu", "--main", broken, "--out", str(tmp_path / "b"), check=False)
    assert unparsable.returncode == 1 and "no launch script, the entry script could not be parsed" in unparsable.stderr
    assert not (tmp_path / "b" / "run_distributed_npu.sh").exists()


# ---------------------------------------------------------------- complete safe ports

def _ported(src, profile="npu"):
    from transfer.migrate.port import port_source

    text = port_source(src, profile).text
    header = f"import torch_{profile}  # registers torch.{profile}\n"
    return text.replace(header, "", 1)


FLOW_PATTERNS = {  # CUDA source -> its safe port (the vendor import line aside)
    "local variable": ("import torch\ndef f(x):\n    dev = 'cuda:0'\n    return x.to(dev)\n",
                       "import torch\ndef f(x):\n    dev = 'npu:0'\n    return x.to(dev)\n"),
    "module variable read in a function": (
        "import torch\ndevice = 'cuda'\ndef f(x):\n    return x.to(device)\n",
        "import torch\ndevice = 'npu'\ndef f(x):\n    return x.to(device)\n"),
    "default argument": ("import torch\ndef f(x, device='cuda'):\n    return x.to(device)\n",
                         "import torch\ndef f(x, device='npu'):\n    return x.to(device)\n"),
    "passed to a parameter of this file": (
        "import torch\ndef f(x, device='cuda'):\n    return x.to(device)\ndevice = 'cuda:1'\nf(torch.ones(1), device)\n",
        "import torch\ndef f(x, device='npu'):\n    return x.to(device)\ndevice = 'npu:1'\nf(torch.ones(1), device)\n"),
    "--device option": (
        "import argparse, torch\np = argparse.ArgumentParser()\np.add_argument('--device', default='cuda')\n"
        "args = p.parse_args()\nx = torch.ones(1).to(args.device)\n",
        "import argparse, torch\np = argparse.ArgumentParser()\np.add_argument('--device', default='npu')\n"
        "args = p.parse_args()\nx = torch.ones(1).to(args.device)\n"),
    "f-string and torch.device with an index": (
        "import torch\nrank = 1\nd = f'cuda:{rank}'\ne = torch.device('cuda', rank)\ntorch.ones(1, device=d).to(e)\n",
        "import torch\nrank = 1\nd = f'npu:{rank}'\ne = torch.device('npu', rank)\ntorch.ones(1, device=d).to(e)\n"),
    "comparisons of a ported variable follow it": (
        "import torch\ndevice = 'cuda'\nif device == 'cuda':\n    x = torch.ones(1).to(device)\n"
        "fast = 'cuda' in device\n",
        "import torch\ndevice = 'npu'\nif device == 'npu':\n    x = torch.ones(1).to(device)\n"
        "fast = 'npu' in device\n"),
    "backend variable": ("import torch.distributed as dist\nbackend = 'nccl'\ndist.init_process_group(backend=backend)\n",
                         "import torch.distributed as dist\nbackend = 'hccl'\ndist.init_process_group(backend=backend)\n"),
    ".cuda(index) and .cuda(device)": (
        "import torch\nm = torch.nn.Linear(1, 1).cuda(local_rank)\nw = m.weight.cuda(m.bias.device)\n",
        "import torch\nm = torch.nn.Linear(1, 1).npu(local_rank)\nw = m.weight.to(m.bias.device)\n"),
    ".cuda(a device string variable) goes through .to (Module.npu takes an index only)": (
        "import torch\ndev = 'cuda:0'\nm = torch.nn.Linear(1, 1).cuda(dev)\n",
        "import torch\ndev = 'npu:0'\nm = torch.nn.Linear(1, 1).to(dev)\n"),
    "--device option reassigned from its own values": (
        "import argparse, torch\np = argparse.ArgumentParser()\np.add_argument('--device', default='cuda')\n"
        "args = p.parse_args()\nif not torch.cuda.is_available():\n    args.device = 'cpu'\nx = torch.ones(1).to(args.device)\n",
        "import argparse, torch\np = argparse.ArgumentParser()\np.add_argument('--device', default='npu')\n"
        "args = p.parse_args()\nif not torch.npu.is_available():\n    args.device = 'cpu'\nx = torch.ones(1).to(args.device)\n"),
    "a device object's type (every device of a ported program is the target's)": (
        "def f(x):\n    return x.device.type == 'cuda' or str(x.device) == 'cuda:0'\n",
        "def f(x):\n    return x.device.type == 'npu' or str(x.device) == 'npu:0'\n"),
    "a variable passed on to code not in view (a device of the ported program)": (
        "import torch\ndevice = 'cuda'\nmodel = torch.nn.Linear(1, 1).to(device)\nhelper(device)\n",
        "import torch\ndevice = 'npu'\nmodel = torch.nn.Linear(1, 1).to(device)\nhelper(device)\n"),
    "the nanoGPT / llm.c idiom: f-string, substring test, device type, autocast": (
        "import os, torch\nfrom contextlib import nullcontext\ndevice = 'cuda'\nif os.environ.get('RANK'):\n"
        "    device = f'cuda:{os.environ[\"LOCAL_RANK\"]}'\n    torch.cuda.set_device(device)\n"
        "device_type = 'cuda' if 'cuda' in device else 'cpu'\n"
        "ctx = torch.amp.autocast(device_type=device_type) if device_type == 'cuda' else nullcontext()\n",
        "import os, torch\nfrom contextlib import nullcontext\ndevice = 'npu'\nif os.environ.get('RANK'):\n"
        "    device = f'npu:{os.environ[\"LOCAL_RANK\"]}'\n    torch.npu.set_device(device)\n"
        "device_type = 'npu' if 'npu' in device else 'cpu'\n"
        "ctx = torch.amp.autocast(device_type=device_type) if device_type == 'npu' else nullcontext()\n"),
    "a parameter compared, every caller in view": (
        "import torch\nclass M(torch.nn.Module):\n    def opt(self, device_type):\n"
        "        return device_type == 'cuda'\ndevice = 'cuda'\nm = M().to(device)\n"
        "m.opt(device_type='cuda' if 'cuda' in device else 'cpu')\n",
        "import torch\nclass M(torch.nn.Module):\n    def opt(self, device_type):\n"
        "        return device_type == 'npu'\ndevice = 'npu'\nm = M().to(device)\n"
        "m.opt(device_type='npu' if 'npu' in device else 'cpu')\n"),
    "aliases of torch.cuda": (
        "import torch\nimport torch.cuda as tc\nfrom torch.cuda.amp import autocast, GradScaler\ntc.synchronize()\n"
        "with autocast(enabled=True):\n    pass\ns = GradScaler()\n",
        "import torch\nimport torch.npu as tc\nfrom torch.amp import autocast, GradScaler\ntc.synchronize()\n"
        "with autocast(\"npu\", enabled=True):\n    pass\ns = GradScaler(\"npu\")\n"),
}

LOOK_ALIKES = {  # left exactly as they are
    "paths": "import torch\nm = torch.load('/ckpt/cuda_model.pt')\nckpt_dir = 'runs/cuda'\n",
    "log messages": "import logging\nlogging.info('moving the model to cuda')\nprint('cuda:0 is busy')\n",
    "a parameter compared, value unknown": "def opt(params, device_type):\n    return device_type == 'cuda'\n",
    "an attribute compared, value unknown": "def f(x):\n    return x.kind == 'cuda'\n",
    "a variable stored on an object": "class T:\n    def __init__(self, device='cuda'):\n        self.device = device\n",
    "a loop variable": "import torch\nfor device in ['cuda', 'cpu']:\n    torch.ones(1).to(device)\n",
    "a variable that reaches no device argument": "name = 'cuda'\nprint(name)\n",
}


@pytest.mark.parametrize("pattern", list(FLOW_PATTERNS))
def test_port_device_strings_through_variables_and_defaults(pattern):
    src, expected = FLOW_PATTERNS[pattern]
    assert _ported(src) == expected


@pytest.mark.parametrize("case", list(LOOK_ALIKES))
def test_port_leaves_look_alikes_alone(case):
    from transfer.migrate.port import port_source

    src = LOOK_ALIKES[case]
    ported = port_source(src, "npu")
    kept = [line for line in ported.text.splitlines() if not line.startswith("import torch_npu")]
    assert kept == src.splitlines()
    again = port_source(ported.text, "npu")
    assert again.text == ported.text  # and a second run finds the same things left
    assert [c[1:] for c in again.changes if c.operation == "UNSUPPORTED"] == \
        [c[1:] for c in ported.changes if c.operation == "UNSUPPORTED"]


def _half_ported(text, dev):
    from transfer.migrate.port import half_ported

    return half_ported(text, dev)


CONSISTENCY = {  # idioms once found half-ported: both sides or neither
    "device = torch.device(... if is_available() else 'cpu')": (
        "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n",
        "import torch\ndevice = torch.device('npu' if torch.npu.is_available() else 'cpu')\n"),
    "--device default, read as a device": (
        "import argparse, torch\np = argparse.ArgumentParser()\n"
        "p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')\n"
        "args = p.parse_args()\nx = torch.ones(1).to(args.device)\n",
        "import argparse, torch\np = argparse.ArgumentParser()\n"
        "p.add_argument('--device', default='npu' if torch.npu.is_available() else 'cpu')\n"
        "args = p.parse_args()\nx = torch.ones(1).to(args.device)\n"),
    "--device default, the namespace passed on: neither side": (
        "import argparse, torch\np = argparse.ArgumentParser()\n"
        "p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')\n"
        "args = p.parse_args()\nmain(args)\n", None),
    "is_available() and get_device_capability() >= (8, 0): neither on npu": (
        "import torch\nuse_bf16 = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)\n",
        None),
    "not is_available() and device == 'cuda', device ported": (
        "import torch\ndevice = 'cuda'\nif not torch.cuda.is_available() and device == 'cuda':\n    device = 'cpu'\n"
        "x = torch.ones(1).to(device)\n",
        "import torch\ndevice = 'npu'\nif not torch.npu.is_available() and device == 'npu':\n    device = 'cpu'\n"
        "x = torch.ones(1).to(device)\n"),
    "not is_available() and device == 'cuda', device unknown: neither": (
        "import torch\ndef pick(device):\n    if not torch.cuda.is_available() and device == 'cuda':\n"
        "        return 'cpu'\n    return device\n", None),
}


@pytest.mark.parametrize("idiom", list(CONSISTENCY))
def test_port_rewrites_both_sides_of_a_test_or_neither(idiom):
    from transfer.migrate.port import port_source

    src, expected = CONSISTENCY[idiom]
    ported = port_source(src, "npu")
    text = ported.text.replace("import torch_npu  # registers torch.npu\n", "", 1)
    assert text == (src if expected is None else expected)
    assert _half_ported(ported.text, "npu") == []
    if expected is None:  # what was kept is named, with why
        left = [c for c in ported.changes if c.operation == "UNSUPPORTED"]
        assert left and all(c.message for c in left)


def test_port_checks_what_it_wrote_for_half_ported_conditionals():
    """Port's own check reads again only the conditionals it edited, and finds what a whole re-read finds there;
    a conditional the author wrote mixed is the author's (not named); an edit across a conditional's edge makes
    it read the whole file again."""
    from transfer.migrate import names, scan
    from transfer.migrate.edits import apply_edits
    from transfer.migrate.port import Porter, half_ported

    src = ("import torch\nx = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
           "y = ('npu' if torch.cuda.is_available()\n     else 'cpu')\nz = 1\n")
    tree = scan.parse(src, "t.py")
    imports = names.Imports(tree)
    porter = Porter(tree, src, "t.py", "npu", False, scan.scan_tree(tree, src, "t.py", imports), imports)
    literal = src.index("'cuda'")
    only_value = [(literal, literal + 6, "'npu'")]  # the value without its test: half-ported
    text = apply_edits(src, only_value)
    assert porter.half_ported_edits(only_value, text) == [(2, "'npu' if torch.cuda.is_available() else 'cpu'")]
    assert (2, "'npu' if torch.cuda.is_available() else 'cpu'") in half_ported(text, "npu")
    assert len(half_ported(text, "npu")) == 2  # the whole re-read names the author's line 3 too
    test = src.index("torch.cuda.is_available()")
    both = only_value + [(test + 6, test + 10, "npu")]
    assert porter.half_ported_edits(both, apply_edits(src, both)) == []
    tail = src.index("else 'cpu'\n")
    across = [(tail, tail + 11, "else 'npu'\n")]  # from inside line 2's conditional to the next line
    assert porter.half_ported_edits(across, apply_edits(src, across)) == half_ported(apply_edits(src, across), "npu")
    assert [line for line, _ in half_ported(apply_edits(src, across), "npu")] == [2, 3]


def test_ported_fixtures_and_examples_are_never_half_ported():
    from transfer.migrate.port import port_source

    sources = [os.path.join(d, n) for d in (PUBLIC, EXAMPLES, SCRIPTS) for n in sorted(os.listdir(d))
               if n.endswith(".py")]
    for path in sources:
        for profile in ("npu", "sdaa", "gcu"):
            text = open(path, encoding="utf-8").read()
            assert _half_ported(port_source(text, profile, path).text, profile) == [], (path, profile)


BLOCKERS = {  # (file under PUBLIC, API) scan and port must both name
    ("setup.py", "torch.utils.cpp_extension.CUDAExtension"), ("jit_ops.py", "torch.utils.cpp_extension.load"),
    ("fused_ops_kernel.cu", "CUDA source file"), ("jit_ops.py", "triton"), ("jit_ops.py", "triton.jit"),
    ("fast_attention.py", "apex.optimizers.FusedAdam"), ("fast_attention.py", "flash_attn.flash_attn_func"),
    ("fast_attention.py", "bitsandbytes"),
    ("fast_attention.py", "fused_lamb_CUDA"),
}


def test_blockers_are_named_by_scan_and_in_unsupported_api_csv(tmp_path):
    as_json = json.loads(cli("scan", PUBLIC, "--device", "npu", "--format", "json").stdout)
    found = {(os.path.basename(f["file"]), f["api"]) for f in as_json["findings"]}
    assert BLOCKERS <= found, BLOCKERS - found
    for f in as_json["findings"]:
        if (os.path.basename(f["file"]), f["api"]) in BLOCKERS - {("fast_attention.py", "flash_attn.flash_attn_func"),
                                                                   ("fast_attention.py", "apex.optimizers.FusedAdam")}:
            assert f["status"]["npu"]["cls"] == "unsupported" and f["status"]["npu"]["reason"], f
    triton = next(f for f in as_json["findings"] if f["api"] == "triton.jit")
    assert "Triton-Ascend" in triton["status"]["npu"]["reason"]  # what the vendor offers
    text = cli("scan", PUBLIC, "--device", "sdaa").stdout
    assert "fused_ops_kernel.cu:1:1: CUDA source file: unsupported" in text
    rows = list(csv.reader(io.StringIO(cli("scan", PUBLIC, "--device", "gcu", "--format", "csv").stdout)))
    assert {(os.path.basename(r[0]), r[3]) for r in rows[1:]} >= BLOCKERS
    assert cli("scan", PUBLIC, "--strict", "--device", "npu").returncode == 1
    cli("port", PUBLIC, "--device", "npu", "--out", str(tmp_path / "out"))
    with open(tmp_path / "out" / "unsupported_api.csv") as fh:
        left = {(os.path.basename(r[0]), r[3]) for r in list(csv.reader(fh))[1:]}
    rewritten = {("fast_attention.py", "apex.optimizers.FusedAdam")}  # to torch (test_native_rewrites.py)
    assert BLOCKERS - rewritten <= left and not rewritten & left, (BLOCKERS - left, rewritten & left)
    assert "torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)" in \
        (tmp_path / "out" / "fast_attention.py").read_text()
    assert (tmp_path / "out" / "csrc" / "fused_ops_kernel.cu").exists()  # copied as it is


def test_second_port_run_leaves_what_the_first_said_and_scan_agrees(tmp_path):
    first = cli("port", PUBLIC, EXAMPLES, "--device", "sdaa", "--out", str(tmp_path / "a"), "--jobs", "2")
    left = re.search(r"(\d+) left for a person", first.stderr).group(1)
    again = cli("port", str(tmp_path / "a"), "--device", "sdaa", "--out", str(tmp_path / "b"))
    assert re.search(r"Transformed 0 / Skipped \d+ / Failed 0 file\(s\); 0 change\(s\), (\d+) left", again.stderr) \
        .group(1) == left, (first.stderr, again.stderr)
    # what scan calls translated to torch.sdaa.X is what port rewrote: none of it is found again
    before = json.loads(cli("scan", PUBLIC, EXAMPLES, "--device", "sdaa", "--format", "json").stdout)["findings"]
    after = json.loads(cli("scan", str(tmp_path / "a"), "--device", "sdaa", "--format", "json").stdout)["findings"]
    translated = [f for f in before if f["status"]["sdaa"]["to"].startswith("torch.sdaa.")]
    assert translated and not [f for f in after if f["status"]["sdaa"]["to"].startswith("torch.sdaa.")]


def test_progress_shows_only_on_a_terminal(monkeypatch):
    from transfer.migrate import progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(progress, "_DELAY", 0.0)
    monkeypatch.setitem(sys.modules, "tqdm", None)  # tqdm absent: the plain line
    tty = Terminal()
    with progress.Bar(3, "transfer port", stream=tty) as bar:
        for _ in range(3):
            bar.update()
    assert "transfer port: 3/3 files" in tty.getvalue()
    piped = io.StringIO()
    with progress.Bar(3, "transfer port", stream=piped) as bar:
        bar.update(3)
    assert piped.getvalue() == ""
    assert list(progress.pool_map(abs, list(range(-40, 0)), jobs=2)) == list(range(40, 0, -1))


def test_files_without_a_trigger_word_have_no_findings():
    """scan and port skip the tree walk of files that spell none of names.TRIGGERS (a syntax check only):
    every finding anywhere in the fixtures, examples and scripts is in a file that spells one, and every
    name the resolver reports spells one itself."""
    from transfer.migrate import names, scan

    for folder in (FIXTURES, PUBLIC, EXAMPLES, SCRIPTS, os.path.join(ROOT, "tests", "frameworks")):
        for root, _, files in os.walk(folder):
            for name in files:
                if name.endswith(".py") and "broken" not in name:
                    path = os.path.join(root, name)
                    try:
                        text = open(path, encoding="utf-8").read()
                    except UnicodeDecodeError:
                        continue
                    found = scan.scan_tree(scan.parse(text, path), text, path)
                    assert not found or names.might_have_findings(text), (path, found[:3])
    from transfer import support

    for api in list(names.NAMED) + list(names.SYNONYMS):  # a component every use or import of it spells
        assert set(api.lower().split(".")[1:]) & set(names.TRIGGERS), api
    for api in [row[0] for row in support.THIRDPARTY_APIS]:  # its package, which every import of it spells
        assert api.lower().split(".")[0] in names.TRIGGERS, api
    with pytest.raises(SyntaxError):
        scan.scan_source("def f(:\n    pass\n")
    assert scan.scan_source("return 1\n") == []  # compile() refuses it, ast does not: no false failure

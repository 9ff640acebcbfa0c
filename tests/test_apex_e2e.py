"""End to end: public-style scripts using apex, CUDA graphs and a torch.library
CUDA op, unmodified, on the cpu target and the stand-ins, through the three ways in.

Scripts (tests/scripts/thirdparty/, none mentions transfer):
  apex_ddp  apex_amp_ddp.py under torchrun, 2 ranks: apex.amp O1, apex.parallel.DistributedDataParallel,
            convert_syncbn_model, FusedSGD
  llama     llama_fused.py: a LLaMA-style decoder with FusedRMSNorm, FusedAdam, bf16 autocast picked by
            torch.cuda.is_bf16_supported(), rotary, SDPA
  graph     cuda_graph_train.py: whole-network torch.cuda.graph capture of the training step and a captured
            inference step; compared with the same script's eager run (--cuda-graph off) on the same target
  custom_op custom_op_model.py: kernels registered for "CUDA" with torch.library.Library.impl and
            @torch.library.custom_op(device_types="cuda") with register_fake / register_autograd

The selection (14 cells, not the 4 x 4 x 3 product, ~1 h on two loaded cores): every script on the cpu
target and on the npu stand-in (torch_npu's graph API path for `graph`), the DDP script on every
target (collectives through each vendor's backend), and each target entered each way at least once
across the scripts: cpu env/import/runner, npu runner/env/import, sdaa import/env/runner, gcu
env/runner/import. sdaa covers the replay path of CUDA graphs on a vendor without a graph API.

Asserted from outside: exit 0 without "terminate called", every rank printed "done" and the same
parameter digest on the expected device, the loss fell below a quarter of its first value, the
stand-in's stats (device indices, collectives through the vendor backend only for DDP), TRANSFER_REPORT
naming target and backend; the graph run printed exactly the eager run's losses and parameters.
"""

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import SCRIPTS
from test_e2e_matrix import (BACKENDS, CELL_NO_STANDINS, STANDINS, Cell, Outcome, check_digests, check_ok,  # noqa: F401
                             check_reports, check_stats, command, environment, expected_devices, extension, launch,
                             torchrun)

pytestmark = pytest.mark.slow  # end-to-end jobs (the e2e matrix keeps one cell per way in in the fast tier)

HERE = os.path.join(SCRIPTS, "thirdparty")
SCRIPT_FILES = {"apex_ddp": ("apex_amp_ddp.py", 2), "llama": ("llama_fused.py", 0),
                "graph": ("cuda_graph_train.py", 0), "custom_op": ("custom_op_model.py", 0)}
CELLS = [
    Cell("apex_ddp", "cpu", "env"), Cell("apex_ddp", "npu", "runner"), Cell("apex_ddp", "sdaa", "import"),
    Cell("apex_ddp", "gcu", "env"),
    Cell("llama", "cpu", "import"), Cell("llama", "npu", "env"), Cell("llama", "gcu", "runner"),
    Cell("graph", "cpu", "runner"), Cell("graph", "npu", "import"), Cell("graph", "sdaa", "env"),
    Cell("custom_op", "cpu", "env"), Cell("custom_op", "npu", "runner"), Cell("custom_op", "sdaa", "runner"),
    Cell("custom_op", "gcu", "import"),
]
LOSS = re.compile(r"rank (\d+): loss ([\d.]+) -> ([\d.]+)")


def run(cell: Cell, base: str, args=(), variant="") -> Outcome:
    workdir = os.path.join(base, cell.id + variant)
    os.makedirs(workdir)
    outcome = Outcome(cell, workdir)
    name, ranks = SCRIPT_FILES[cell.script]
    env = environment(cell, workdir, base)
    launch(outcome, [command(cell, os.path.join(HERE, name), list(args), workdir, torchrun(ranks) if ranks else ())],
           env)
    return outcome


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory):
    base = str(tmp_path_factory.mktemp("thirdparty-e2e"))
    selected = [item.callspec.params["cell"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")]
    selected = [c for c in selected if c.profile == "cpu" or STANDINS]
    if any(c.profile != "cpu" for c in selected):
        request.getfixturevalue("extension")
    jobs = [(c, ()) for c in selected] + [(c, ("--cuda-graph", "off")) for c in selected if c.script == "graph"]
    with ThreadPoolExecutor(max_workers=int(os.environ.get("E2E_JOBS", "2"))) as pool:
        futures = {(c.id, args): pool.submit(run, c, base, args, "-eager" if args else "") for c, args in jobs}
        yield futures


def _marks(cell):
    return [] if cell.profile == "cpu" else [pytest.mark.skipif(not STANDINS, reason=CELL_NO_STANDINS)]


@pytest.mark.parametrize("cell", [pytest.param(c, marks=_marks(c), id=c.id) for c in CELLS])
def test_cell(cell, outcomes):
    outcome = outcomes[(cell.id, ())].result()
    ranks = SCRIPT_FILES[cell.script][1]
    world = max(1, ranks)
    check_ok(outcome)
    check_reports(outcome)
    done = sorted(int(r) for r in re.findall(r"rank (\d+): done", outcome.stdout))
    assert done == list(range(world)), outcome.log()
    check_digests(outcome, world, expected_devices(cell.profile, range(world)))
    check_stats(outcome, list(range(world)), distributed=bool(ranks))
    losses = [(float(a), float(b)) for _, a, b in LOSS.findall(outcome.stdout)]
    assert len(losses) == world, outcome.log()
    for first, last in losses:
        assert last < first / 4, f"did not learn: {first} -> {last}\n{outcome.log()}"
    if cell.script == "apex_ddp":
        assert outcome.stdout.count(f"backend {BACKENDS[cell.profile]}") == 2, outcome.log()
    if cell.script == "graph":
        eager = outcomes[(cell.id, ("--cuda-graph", "off"))].result()
        check_ok(eager)
        pick = re.compile(r"^(losses .*|rank 0: parameters .*|rank 0: loss .*)$", re.M)
        assert pick.findall(outcome.stdout) == pick.findall(eager.stdout), outcome.log() + eager.log()
        assert "capture records the ops" in outcome.stderr or cell.profile == "npu", outcome.log()
    if cell.script == "llama":
        assert "autocast torch.bfloat16" in outcome.stdout, outcome.log()  # bf16 hardware: bf16 chosen

"""The upstream packages' own test suites, unmodified, against transfer's drop-ins (``nox -s upstream``).

    python docs/upstream.py --run DIR PYTHON     extract each suite's tests at its pinned commit from the git
                                                 checkouts DIR/flash-attention, DIR/apex, DIR/xformers into
                                                 .nox/upstream/<name>, run them with PYTHON (torch, the wheel,
                                                 the suites' requirements) on TRANSFER_DEVICE=cpu, junit files
                                                 in .nox/upstream/junit/
    python docs/upstream.py --write              the counts table of docs/thirdparty-upstream.md from those files

Nothing of the upstream projects is copied into this repository: the developer fetches the
repositories (``git clone`` them into DIR; each commit below must be in its history), this script
takes the pinned commit's tests with ``git archive``. Not part of CI (CI reaches package registries
only), like ``nox -s bench``: the recorded table says the commits and the date it was run.

flash-attention's tests/test_flash_attn.py has ~508,000 parametrizations: a seeded sample
(UPSTREAM_SAMPLE tests, seed UPSTREAM_SEED) runs, chosen after collection by this file's pytest
plugin (`pytest_collection_modifyitems`); its determinism tests (250 iterations each) are left out
as a machine limit, listed in the doc. xformers' test_mem_eff_attention.py runs a seeded sample of what
`XFORMERS_CLAIMED` selects, its test_swiglu.py a seeded sample; xformers' tests import helpers shipped
inside the xformers package (``xformers.attn_bias_utils``), which the plugin loads from the pinned commit
for the run only (`_Helpers`).
"""

from __future__ import annotations

import datetime
import os
import random
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import Dict, List, NamedTuple, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, ".nox", "upstream")
JUNIT = os.path.join(WORK, "junit")
DOC = os.path.join(ROOT, "docs", "thirdparty-upstream.md")


#: What xformers' drop-in claims of test_mem_eff_attention.py: the operators it gives in full (cutlass's and
#: flash's, parametrized on "cuda", the target), forward and backward through the public API and the operator
#: interface, and the bias tests; not the ROCm / split-K / decoder / paged / merge kernels' tests.
XFORMERS_CLAIMED = ("(cutlass or fa2 or attn_bias or bias_lower or local_attn_bias or window_size or TestAttnBias "
                    "or empty_tensors or grad_checkpointing or custom_scale or lowlevel_api) "
                    "and not _ck and not ck_ and not splitk and not decoder and not paged and not merge and not fp8 "
                    "and not fa3 and not cuda_streams and not compile")


class Suite(NamedTuple):
    name: str  # the folder under DIR and .nox/upstream
    repository: str
    commit: str
    tests: Tuple[str, ...]  # paths (files or folders) of the commit's tests to run
    folder: str  # what `git archive` extracts
    sample: int = 0  # >0: a seeded sample of that many collected tests
    deselect: str = ""  # a pytest -k expression of tests left out (the doc says why)
    path: Tuple[str, ...] = ()  # folders of the tests put on sys.path, as the project's own runner does
    helpers: Tuple[str, ...] = ()  # the project's own test helpers shipped inside its package (see `_Helpers`)


SUITES = (
    Suite("flash-attention", "Dao-AILab/flash-attention", "5231d95fe13733fb534c01895f7ea88c6a6c7793",  # v2.7.4.post1
          ("tests/test_flash_attn.py",), "tests", sample=100, deselect="not deterministic"),
    Suite("flash-attention-rotary", "Dao-AILab/flash-attention", "5231d95fe13733fb534c01895f7ea88c6a6c7793",
          ("tests/layers/test_rotary.py",), "tests"),
    Suite("apex", "NVIDIA/apex", "6424da3b4faa6c8f062da4a48c424fff3f02d42d",
          ("tests/L0/run_optimizers", "tests/L0/run_fused_layer_norm"), "tests/L0",
          path=("tests/L0/run_optimizers",)),  # apex's run_test.py runs each folder: its tests import siblings
    Suite("xformers", "facebookresearch/xformers", "0b3963adc401d4e22b37515c35b0730d0623c9c5",  # v0.0.29.post3
          ("tests/test_mem_eff_attention.py",), "tests", sample=150, deselect=XFORMERS_CLAIMED,
          helpers=("xformers/attn_bias_utils.py",)),
    Suite("xformers-swiglu", "facebookresearch/xformers", "0b3963adc401d4e22b37515c35b0730d0623c9c5",
          ("tests/test_swiglu.py",), "tests", sample=40, helpers=("xformers/attn_bias_utils.py",)),
    Suite("xformers-ops", "facebookresearch/xformers", "0b3963adc401d4e22b37515c35b0730d0623c9c5",
          ("tests/test_unbind.py", "tests/test_indexing.py"), "tests", helpers=("xformers/attn_bias_utils.py",)),
)

#: What the suites import besides torch and the drop-ins.
REQUIREMENTS = ("pytest", "einops", "scipy", "expecttest", "hypothesis",
                "transformers==4.26.1")  # flash-attention's rotary tests import GPT-NeoX / GPT-J helpers removed since


def checkout_of(directory: str, suite: Suite) -> str:
    return os.path.join(directory, suite.repository.split("/")[1])


def run(directory: str, python: str) -> None:
    """UPSTREAM_ONLY=name,name runs those suites alone; UPSTREAM_SAMPLE_SIZE=N overrides the sample sizes."""
    os.makedirs(JUNIT, exist_ok=True)
    only = [name for name in os.environ.get("UPSTREAM_ONLY", "").split(",") if name]
    for suite in SUITES:
        if only and suite.name not in only:
            continue
        if suite.sample and os.environ.get("UPSTREAM_SAMPLE_SIZE"):
            suite = suite._replace(sample=int(os.environ["UPSTREAM_SAMPLE_SIZE"]))
        repo = checkout_of(directory, suite)
        tree = os.path.join(WORK, suite.name)
        subprocess.run(["rm", "-rf", tree], check=True)
        os.makedirs(tree)
        archive = subprocess.run(["git", "-C", repo, "archive", suite.commit, suite.folder], capture_output=True)
        if archive.returncode != 0:
            sys.exit(f"{repo}: commit {suite.commit} of {suite.repository} not found "
                     f"({archive.stderr.decode().strip()}); clone it there, or `git -C {repo} fetch origin`")
        subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
        helpers = os.path.join(tree, "_upstream_helpers")
        for helper in suite.helpers:
            os.makedirs(helpers, exist_ok=True)
            source = subprocess.run(["git", "-C", repo, "show", f"{suite.commit}:{helper}"], capture_output=True,
                                    check=True).stdout
            with open(os.path.join(helpers, helper.replace("/", ".")), "wb") as fh:
                fh.write(source)
        env = {**os.environ, "TRANSFER_DEVICE": "cpu", "TRANSFER_QUIET": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(os.path.abspath(__file__)),
                                                           *(os.path.join(tree, p) for p in suite.path),
                                                           os.environ.get("PYTHONPATH")])),
               "UPSTREAM_SAMPLE": str(suite.sample), "UPSTREAM_SEED": "0",
               "UPSTREAM_HELPERS": helpers if suite.helpers else ""}
        with open(os.path.join(JUNIT, suite.name + ".sample"), "w") as fh:
            fh.write(str(suite.sample))
        args = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "upstream",
                f"--junitxml={os.path.join(JUNIT, suite.name + '.xml')}", "-o", "junit_family=xunit1",
                "-rfEs", "--continue-on-collection-errors", *(["-k", suite.deselect] if suite.deselect else []), *suite.tests]
        print(f"== {suite.name} @ {suite.commit[:10]}: {' '.join(args[3:])}", flush=True)
        subprocess.run(args, cwd=tree, env=env, preexec_fn=_memory_cap)  # failures are the result, not an error


def _memory_cap() -> None:
    """Address space of a suite's pytest capped at UPSTREAM_MEMORY_GB (default 10): a test that would take
    the machine's memory fails with torch's allocation error instead (the doc lists them)."""
    import resource

    limit = int(float(os.environ.get("UPSTREAM_MEMORY_GB") or 10) * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


# ------------------------------------------------------------------ the pytest plugin (-p upstream)

class _Helpers:
    """Import hook for the run only: a project's test helpers that ship inside its package (xformers'
    ``xformers/attn_bias_utils.py``, imported by its tests as ``xformers.attn_bias_utils``) are loaded from the
    pinned commit's file in UPSTREAM_HELPERS (saved there as ``xformers.attn_bias_utils.py``) as a submodule of
    the drop-in. Nothing is written into the installed drop-in or this repository."""

    def __init__(self, folder: str):
        self.files = {name[:-3]: os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".py")}

    def find_spec(self, fullname, path=None, target=None):
        import importlib.util

        if fullname in self.files:
            return importlib.util.spec_from_file_location(fullname, self.files[fullname])
        return None


_HELPERS = _Helpers(os.environ["UPSTREAM_HELPERS"]) if os.environ.get("UPSTREAM_HELPERS") else None


def pytest_collectstart(collector):
    """Keeps the helpers' finder first: transfer puts its drop-ins' finder in front when it activates (on the
    first ``import torch``, here made before the tests import anything)."""
    if _HELPERS is not None and sys.meta_path[0] is not _HELPERS:
        import torch  # noqa: F401
        if _HELPERS in sys.meta_path:
            sys.meta_path.remove(_HELPERS)
        sys.meta_path.insert(0, _HELPERS)


def pytest_collection_modifyitems(config, items):
    sample = int(os.environ.get("UPSTREAM_SAMPLE") or 0)
    if 0 < sample < len(items):
        keep = set(random.Random(int(os.environ.get("UPSTREAM_SEED") or 0)).sample(range(len(items)), sample))
        dropped = [item for i, item in enumerate(items) if i not in keep]
        items[:] = [item for i, item in enumerate(items) if i in keep]
        config.hook.pytest_deselected(items=dropped)


# ------------------------------------------------------------------ the table

def counts(path: str) -> Dict[str, int]:
    result = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    if not os.path.exists(path):
        return result
    for case in ET.parse(path).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            result["failed"] += 1
        elif "error" in kinds:
            result["errors"] += 1
        elif "skipped" in kinds:
            result["skipped"] += 1
        else:
            result["passed"] += 1
    return result


def table() -> str:
    lines = ["| suite | commit | tests | passed | failed | errors | skipped |", "|---|---|---|---|---|---|---|"]
    for suite in SUITES:
        c = counts(os.path.join(JUNIT, suite.name + ".xml"))
        size = open(os.path.join(JUNIT, suite.name + ".sample")).read() if suite.sample else ""
        chosen = ("`-k` XFORMERS_CLAIMED of docs/upstream.py" if suite.deselect == XFORMERS_CLAIMED
                  else f"`-k \"{suite.deselect}\"`")
        sample = f" (seeded sample of {size}{'; ' + chosen if suite.deselect else ''})" if suite.sample else ""
        lines.append(f"| {suite.name} | {suite.repository}@{suite.commit[:10]} | {', '.join(suite.tests)}{sample} "
                     f"| {c['passed']} | {c['failed']} | {c['errors']} | {c['skipped']} |")
    return "\n".join(lines)


def write() -> None:
    text = open(DOC).read()
    start, end = "<!-- upstream-table -->", "<!-- /upstream-table -->"
    body = f"{start}\nRun {datetime.date.today().isoformat()}, torch 2.13.0 (CPU build), Python 3.11, TRANSFER_DEVICE=cpu:\n\n{table()}\n{end}"
    text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: body, text, flags=re.S)
    open(DOC, "w").write(text)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"] and len(sys.argv) == 4:
        run(sys.argv[2], sys.argv[3])
    elif sys.argv[1:] == ["--write"]:
        write()
    else:
        sys.exit(__doc__)

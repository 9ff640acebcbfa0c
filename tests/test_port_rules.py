"""Each rule of `transfer port` (transfer/migrate/rules/) on its own.

`port_source(..., rules=(rule,))` runs one rule (or the few it builds on) over a
source: what that rule rewrites, and what it leaves when it is not run, so a
rule's effect is seen apart from the others. The end-to-end behaviour of all
rules together is tests/test_migrate.py's.
"""

import pytest

VENDOR = "import torch_npu  # registers torch.npu\n"


def port(src, *rules, device="npu", unsafe=False):
    """`src` ported with `rules` (every rule when none is named)."""
    from transfer.migrate import rules as every
    from transfer.migrate.port import port_source

    return port_source(src, device, rules=rules or every.ALL, unsafe=unsafe)


def text(src, *rules, device="npu"):
    return port(src, *rules, device=device).text.replace(VENDOR, "")


def rule(name):
    import importlib

    return importlib.import_module(f"transfer.migrate.rules.{name}")


def test_every_rule_is_run_by_default_in_one_order():
    from transfer.migrate import rules

    names = [r.__name__.rsplit(".", 1)[1] for r in rules.ALL]
    assert names[:2] == ["aliases", "native"] and names[-1] == "set_device"
    for r in rules.ALL:  # each rule has at least one phase and says what it rewrites
        assert r.__doc__ and any(hasattr(r, p) for p in ("before_walk", "NODES", "after_walk", "after_settle"))


def test_edit_machinery_has_no_import_of_port():
    """The rules and the edit machinery never import port (no import loop)."""
    import ast
    import pathlib

    import transfer.migrate.rules as rules

    folder = pathlib.Path(rules.__file__).parent
    for path in list(folder.glob("*.py")) + [folder.parent / "edits.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module not in ("port", "migrate.port", "transfer.migrate.port"), path
                assert not (node.level and node.module is None and any(a.name == "port" for a in node.names)), path


def test_cuda_api_rule():
    src = "import torch\ntorch.cuda.synchronize()\nwith torch.cuda.amp.autocast(dtype=torch.bfloat16):\n    pass\n" \
          "ok = x.is_cuda\n"
    assert text(src, rule("cuda_api")) == (
        "import torch\ntorch.npu.synchronize()\nwith torch.autocast(\"npu\", dtype=torch.bfloat16):\n    pass\n"
        "ok = x.is_npu\n")
    assert text(src, rule("strings")) == src  # another rule does not touch it


def test_cuda_calls_rule():
    src = "import torch\nm = M().cuda()\ny = x.cuda(w.device)\nt = x.cuda(1)\n" \
          "import torch.distributed as dist\nb = dist.is_nccl_available()\n"
    assert text(src, rule("cuda_calls")) == (
        "import torch\nm = M().npu()\ny = x.to(w.device)\nt = x.npu(1)\n"
        "import torch.distributed as dist\nb = dist.is_backend_available(\"hccl\")\n")


def test_aliases_rule_all_or_none():
    src = "import torch\nimport torch.cuda as tc\ntc.synchronize()\n"
    assert text(src, rule("aliases")) == "import torch\nimport torch.npu as tc\ntc.synchronize()\n"
    kept = "import torch\nimport torch.cuda as tc\ntc.synchronize()\nf(tc)\n"  # used as a value: kept, with why
    ported = port(kept, rule("aliases"))
    assert ported.text == kept
    assert any("aliased by `import torch.cuda as tc`" in c.message for c in ported.changes
               if c.operation == "UNSUPPORTED")


def test_strings_rule_positions():
    src = 'import torch\nx = torch.ones(2, device="cuda:1")\ntorch.distributed.init_process_group(backend="nccl")\n' \
          'name = "cuda"\nprint(name)\n'
    out = port(src, rule("strings"))
    assert out.text.replace(VENDOR, "") == (
        'import torch\nx = torch.ones(2, device="npu:1")\ntorch.distributed.init_process_group(backend="hccl")\n'
        'name = "cuda"\nprint(name)\n')  # "cuda" outside a device position: left (--unsafe rewrites it)
    assert out.unsafe_skipped == 1


def test_variables_rule_rewrites_values_with_their_comparisons():
    src = 'import torch\ndevice = "cuda"\nx = torch.ones(2).to(device)\nif device == "cuda":\n    pass\n'
    alone = port(src, rule("strings"))
    assert alone.text == src  # the strings rule alone: a variable and a comparison, both left
    both = text(src, rule("strings"), rule("variables"))
    assert both == 'import torch\ndevice = "npu"\nx = torch.ones(2).to(device)\nif device == "npu":\n    pass\n'


def test_conditionals_rule_keeps_a_guard_of_what_is_left():
    src = "import torch\nif torch.cuda.is_available():\n    g = torch.cuda.CUDAGraph()\n"
    rules = (rule("cuda_api"),)
    assert "torch.npu.is_available" in text(src, *rules)  # without the rule: the test alone is rewritten
    guarded = port(src, *rules, rule("conditionals"), device="sdaa")  # sdaa has no graphs: the body is left
    assert "torch.cuda.is_available" in guarded.text
    assert any("kept as CUDA's test" in c.message for c in guarded.changes)


def test_set_device_rule_moves_the_call_before_init_on_tccl():
    src = ("import torch\nimport torch.distributed as dist\n\ndef main(rank):\n"
           "    dist.init_process_group(\"tccl\")\n    torch.cuda.set_device(rank)\n")
    moved = text(src, rule("cuda_api"), rule("set_device"), device="sdaa").replace("import torch_sdaa  # registers "
                                                                                    "torch.sdaa\n", "")
    assert moved.index("torch.sdaa.set_device(rank)") < moved.index("init_process_group")
    assert "set_device(rank)" in text(src, rule("cuda_api"), device="sdaa").split("init_process_group")[1]


@pytest.mark.parametrize("unsafe", [False, True])
def test_native_rule_apex_to_torch(unsafe):
    src = "import torch\nfrom apex.optimizers import FusedAdam\nopt = FusedAdam(params, lr=1e-3)\n"
    out = port(src, rule("native"), unsafe=unsafe).text.replace(VENDOR, "")
    assert "apex" not in out and "torch.optim.AdamW(params, lr=1e-3" in out


def test_strings_rule_device_type_and_backend_comparisons():
    """A device's type and the process group's backend in a ported program are the target's: their comparisons
    are rewritten with them (safe); a value from outside is named, with where it comes from."""
    src = ("import torch\nimport torch.distributed as dist\ndef f(x, cfg):\n"
           "    a = x.device.type == 'cuda'\n    b = 'cuda' in str(x.device)\n    c = dist.get_backend() == 'nccl'\n"
           "    d = cfg['device'] == 'cuda'\n")
    out = port(src, rule("strings"), device="sdaa")
    assert out.text.replace("import torch_sdaa  # registers torch.sdaa\n", "").splitlines()[3:] == [
        "    a = x.device.type == 'sdaa'", "    b = 'sdaa' in str(x.device)", "    c = dist.get_backend() == 'tccl'",
        "    d = cfg['device'] == 'cuda'"]
    (left,) = [c for c in out.changes if c.operation == "UNSUPPORTED"]
    assert left.start_line == 7 and "`cfg['device']` is read from a container" in left.message
    assert "compare with 'sdaa'" in left.message


def test_variables_rule_follows_parameters_whose_callers_are_in_view():
    src = ("import torch\ndef opt(device_type):\n    return device_type == 'cuda'\n"
           "device = 'cuda'\nx = torch.ones(1).to(device)\nopt('cuda' if 'cuda' in device else 'cpu')\n")
    rules = (rule("strings"), rule("variables"))
    assert text(src, *rules).count("'npu'") == 4 and "'cuda'" not in text(src, *rules)
    alone = "def opt(device_type):\n    return device_type == 'cuda'\n"  # no caller in view: named, with why
    (left,) = [c for c in port(alone, *rules).changes if c.operation == "UNSUPPORTED"]
    assert "parameter of opt() (line 1) without a default, and its callers are not in this file" in left.message


FALLBACKS = {
    "apex optimizer, the fallback binds the same name": (
        "import torch\ntry:\n    from apex.optimizers import FusedAdam\nexcept ImportError:\n"
        "    FusedAdam = torch.optim.AdamW\nopt = FusedAdam(p)\n",
        "import torch\nFusedAdam = torch.optim.AdamW\nopt = FusedAdam(p)\n"),
    "apex norm, torch fallback": (
        "import torch\ntry:\n    from apex.normalization import FusedLayerNorm as LayerNorm\n    APEX = True\n"
        "except ImportError:\n    from torch.nn import LayerNorm\n    APEX = False\nnorm = LayerNorm(8)\n",
        "import torch\nfrom torch.nn import LayerNorm\nAPEX = False\nnorm = LayerNorm(8)\n"),
    "flash_attn in a function, None fallback": (
        "import torch\ndef attn(q, k, v):\n    try:\n        from flash_attn import flash_attn_func\n"
        "    except (ImportError, ModuleNotFoundError):\n        flash_attn_func = None\n"
        "    if flash_attn_func is not None:\n        return flash_attn_func(q, k, v)\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n",
        "import torch\ndef attn(q, k, v):\n    flash_attn_func = None\n"
        "    if flash_attn_func is not None:\n        return flash_attn_func(q, k, v)\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n"),
}
KEPT_FALLBACKS = {
    "the fallback is CUDA too": "import torch\ntry:\n    import apex\nexcept ImportError:\n    apex = None\n"
                                "    torch.cuda.synchronize()\n",
    "another exception": "try:\n    import apex\nexcept Exception:\n    apex = None\n",
    "a name only the CUDA path binds is read": "try:\n    from apex import amp\n    HAVE = True\n"
                                               "except ImportError:\n    pass\nprint(amp, HAVE)\n",
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_import_fallbacks_rule(case):
    src, expected = FALLBACKS[case]
    assert text(src, rule("native"), rule("import_fallbacks")) == expected
    from transfer.migrate.port import port_source

    ported = port_source(src, "npu")
    assert ported.text.replace(VENDOR, "") == expected and not [c for c in ported.changes
                                                                if c.operation == "UNSUPPORTED"]
    assert port_source(ported.text, "npu").text == ported.text


@pytest.mark.parametrize("case", list(KEPT_FALLBACKS))
def test_import_fallbacks_rule_keeps_what_it_cannot_take(case):
    src = KEPT_FALLBACKS[case]
    assert "try:" in text(src, rule("cuda_api"), rule("import_fallbacks"))


def test_left_for_a_person_is_grouped_and_capped_with_a_pointer_to_the_csv():
    from transfer.migrate.port_files import Outcome

    rows = [["a.py", i, i, "torch.cuda.utilization", "unsupported: remove it"] for i in range(1, 8)]
    rows += [[f"f{i}.py", 1, 1, "compare 'cuda'", f"reason {i}"] for i in range(50)]
    outcome = Outcome([], [], [], [], 0, rows, None, "out")
    lines = outcome.left(cap=10)
    assert lines[0] == ("7 places (a.py:1, a.py:2, a.py:3, a.py:4, ...): torch.cuda.utilization: "
                        "unsupported: remove it")
    assert lines[1] == "f0.py:1: compare 'cuda': reason 0"
    assert len(lines) == 11 and lines[-1] == "... and 41 more; every one, with its line and why: " \
        + __import__("os").path.join("out", "unsupported_api.csv")
    assert outcome._replace(reports=None).left(cap=10)[-1].endswith("unsupported_api.csv (written without --diff)")


def test_set_device_rule_moves_init_down_when_the_device_is_computed_after_it():
    """nanoGPT / llm.c: init_process_group, then the local rank read, then set_device(f"cuda:{rank}"): on tccl
    the init moves down past statements that do not use the process group."""
    src = ("import os, torch\nfrom torch.distributed import init_process_group\nif True:\n"
           "    init_process_group(backend='nccl')\n    rank = int(os.environ['LOCAL_RANK'])\n"
           "    device = f'cuda:{rank}'\n    torch.cuda.set_device(device)\n    x = torch.ones(1).to(device)\n")
    out = port(src, device="sdaa").text.replace("import torch_sdaa  # registers torch.sdaa\n", "")
    assert out.splitlines()[3:8] == ["    rank = int(os.environ['LOCAL_RANK'])", "    device = f'sdaa:{rank}'",
                                     "    torch.sdaa.set_device(device)", "    init_process_group(backend='tccl')",
                                     "    x = torch.ones(1).to(device)"]
    uses_group = src.replace("rank = int(os.environ['LOCAL_RANK'])", "rank = torch.distributed.get_rank()")
    kept = port(uses_group, device="sdaa")
    assert kept.text.index("init_process_group") < kept.text.index("set_device")
    assert any("needs the device set before init_process_group" in c.message for c in kept.changes)


def test_conditionals_rule_keeps_a_device_comparison_that_guards_what_fails_natively():
    """imagenet's main.py: `elif device.type == 'cuda': model = DataParallel(model)`. Rewritten, the comparison
    would send the native run into DataParallel (CUDA-only): it stays CUDA's (False natively), with why; a
    comparison that guards only other comparisons is rewritten."""
    src = ("import torch\ndef f(model, x):\n    if x.device.type == 'cuda':\n"
           "        model = torch.nn.DataParallel(model)\n    return model\n")
    out = port(src)
    assert "x.device.type == 'cuda'" in out.text
    assert any("it guards torch.nn.DataParallel" in c.message for c in out.changes if c.start_line == 3)
    ok = "def f(x, cfg):\n    if x.device.type == 'cuda':\n        return cfg.kind == 'cuda'\n"
    assert "x.device.type == 'npu'" in port(ok).text


SPAWNED = '''import argparse
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
parser = argparse.ArgumentParser()
parser.add_argument("--dist-backend", default="nccl")
def main():
    args = parser.parse_args()
    if args.dist_backend == "nccl":
        pass
    mp.spawn(worker, nprocs=2, args=(2, args))
def worker(gpu, n, args):
    dist.init_process_group(backend=args.dist_backend)
    train(args)
def train(args):
    print(args.dist_backend)
'''


@pytest.mark.parametrize("case, ported", [
    ("as written", True),  # the namespace reaches worker() through mp.spawn and train() directly: all in view
    ("another caller", False),  # worker() also called with something else than a namespace
    ("passed to another module", False),
])
def test_strings_rule_follows_an_option_namespace_through_this_files_functions(case, ported):
    """imagenet/main.py's `--dist-backend`: the parsed namespace is passed to this file's functions (directly and
    through torch.multiprocessing.spawn, which calls fn(i, *args)); its default and comparisons are ported with it
    when every reader is in view, else kept with why."""
    src = SPAWNED + {"as written": "", "another caller": "worker(0, 1, object())\n",
                     "passed to another module": "import helpers\nhelpers.run(parser.parse_args())\n"}[case]
    src = src.replace("train(args)\n", "train(args)\n    import helpers\n    helpers.go(args)\n") \
        if case == "passed to another module" else src
    out = port(src, rule("strings"), rule("variables"))
    body = out.text.replace(VENDOR, "")
    assert ('default="hccl"' in body and 'args.dist_backend == "hccl"' in body) is ported, body
    left = [c.message for c in out.changes if c.operation == "UNSUPPORTED"]
    assert bool(left) is not ported, left
    if not ported:
        assert all("namespace `args` is passed on" in m for m in left), left


TIED = {  # what a use left for a person keeps CUDA's with it, so that no line names both CUDA and the target
    "a conditional expression whose test is left": (
        "s = torch.cuda.get_rng_state() if op[2] == 'cuda' else torch.get_rng_state()\n",
        "the test of its conditional expression"),
    "an `and` whose first operand is left": (
        "ok = op[2] == 'cuda' and torch.cuda.is_bf16_supported()\n",
        "the first operand of its `and`/`or`"),
    "a device string passed to a call that is left": (
        "c = torch.cuda.get_device_capability('cuda:1') == (8, 0)\n", "the call it is passed to"),
}


@pytest.mark.parametrize("case", list(TIED))
def test_conditionals_rule_keeps_what_goes_with_a_use_left_for_a_person(case):
    from transfer.migrate.port import half_ported

    line, what = TIED[case]
    src = "import torch\nimport torch.cuda.graphs as g\ndef f(op):\n    " + line
    out = port(src, rule("cuda_api"), rule("strings"), rule("aliases"), rule("conditionals"))
    assert out.text.replace(VENDOR, "").endswith(line), out.text  # the whole line stays CUDA's
    assert half_ported(out.text, "npu") == []
    assert any(f"kept CUDA's with {what}" in c.message for c in out.changes if c.operation == "UNSUPPORTED")
    alone = port(src, rule("cuda_api"), rule("strings"), rule("aliases"))  # without the rule: half-ported
    assert half_ported(alone.text, "npu"), alone.text

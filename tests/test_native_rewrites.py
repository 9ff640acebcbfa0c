"""`transfer port`'s torch-native rewrites of apex (transfer/migrate/rewrites.py).

Two kinds of checks:
* golden: what port writes for CUDA-style sources, and what it names (with why) instead of rewriting;
* equivalence: the original (apex as transfer serves it on the cpu target, whose semantics tests/test_apex.py
  checks against apex's documented rules) and the ported code (plain torch) run the same steps from the same
  seed and end with the same parameters and buffers.
"""

import os
import re

import pytest
import torch

from conftest import SCRIPTS, clean_env, free_port, python

VENDOR_LINE = "import torch_npu  # registers torch.npu\n"


def port(src, unsafe=False):
    from transfer.migrate.port import port_source

    return port_source(src, "npu", unsafe=unsafe)


def native(src, unsafe=False):
    """The ported text of `src`, which must be all torch (the vendor import aside)."""
    ported = port(src, unsafe)
    text = ported.text.replace(VENDOR_LINE, "")
    assert not re.search(r"\bapex\b", text), text
    assert not [c for c in ported.changes if c.operation == "UNSUPPORTED"], ported.changes
    again = port(ported.text, unsafe)
    assert again.text == ported.text and not [c for c in again.changes if c.operation != "UNSUPPORTED"]
    return text


def left(src, unsafe=False):
    """{(line, api): message} of what port leaves for a person in `src` (it must change nothing else)."""
    ported = port(src, unsafe)
    assert ported.text == src, ported.text
    return {(c.start_line, c.api): c.message for c in ported.changes if c.operation == "UNSUPPORTED"}


# ------------------------------------------------------------------ golden: what is written

GOLDEN = {
    "FusedAdam, apex's weight_decay default written": (
        "import torch\nfrom apex.optimizers import FusedAdam\n\nopt = FusedAdam(model.parameters(), lr=3e-4)\n",
        "import torch\n\nopt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0)\n"),
    "FusedAdam, adam_w_mode=False and positional arguments": (
        "import torch\nfrom apex.optimizers import FusedAdam\n\n"
        "opt = FusedAdam(params, 1e-3, True, (0.9, 0.95), adam_w_mode=False, weight_decay=wd)\n",
        "import torch\n\nopt = torch.optim.Adam(params, 1e-3, betas=(0.9, 0.95), weight_decay=wd)\n"),
    "import apex: every use through it, then the import": (
        "import torch\nimport apex\n\nmodel = apex.parallel.convert_syncbn_model(model)\n"
        "model = apex.parallel.DistributedDataParallel(model, message_size=250000000, delay_allreduce=True)\n"
        "opt = apex.optimizers.FusedSGD(model.parameters(), 0.1, 0.9, weight_decay=1e-4, nesterov=True)\n",
        "import torch\n\nmodel = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)\n"
        "model = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)\n"
        "opt = torch.optim.SGD(model.parameters(), 0.1, 0.9, weight_decay=1e-4, nesterov=True)\n"),
    "aliases, and no import torch in the file (the import becomes it)": (
        "import torch.nn as nn\nfrom apex.parallel import DistributedDataParallel as DDP, SyncBatchNorm\n\n"
        "bn = SyncBatchNorm(64, 1e-3, process_group=group)\nnet = DDP(net)\n",
        "import torch.nn as nn\nimport torch\n\nbn = torch.nn.SyncBatchNorm(64, 1e-3, process_group=group)\n"
        "net = torch.nn.parallel.DistributedDataParallel(net, broadcast_buffers=False)\n"),
    "an import alone in its block becomes pass; torch imported as th": (
        "import torch as th\nif use_apex:\n    import apex.optimizers as aopt\n"
        "opt = aopt.FusedAdam(params, lr=0.1, weight_decay=0.01)\n",
        "import torch as th\nif use_apex:\n    pass\nopt = th.optim.AdamW(params, lr=0.1, weight_decay=0.01)\n"),
    "an import under try whose except raises: the try keeps a body": (
        "import torch\ntry:\n    from apex.optimizers import FusedAdam\nexcept ImportError:\n"
        "    raise ImportError('see README')\nopt = FusedAdam(p, weight_decay=0.1)\n",
        "import torch\ntry:\n    pass\nexcept ImportError:\n    raise ImportError('see README')\n"
        "opt = torch.optim.AdamW(p, weight_decay=0.1)\n"),
    "an import statement that binds other modules keeps them": (
        "import os, apex\nimport torch\nopt = apex.optimizers.FusedAdam(p)  # fused\n",
        "import os\nimport torch\nopt = torch.optim.AdamW(p, weight_decay=0.0)  # fused\n"),
}


@pytest.mark.parametrize("case", list(GOLDEN))
def test_port_rewrites_apex_to_torch(case):
    src, expected = GOLDEN[case]
    assert native(src) == expected


def test_unsafe_norms_are_written_only_with_the_flag():
    src = ("import torch\nimport torch.nn as nn\nfrom apex.normalization import FusedLayerNorm, FusedRMSNorm\n\n"
           "norms = nn.ModuleList([FusedLayerNorm(8, eps=1e-6, memory_efficient=True), FusedRMSNorm(8)])\n")
    named = left(src)
    assert port(src).unsafe_skipped == 2
    assert "autocast" in named[(5, "apex.normalization.FusedLayerNorm")]
    assert "torch >= 2.4" in named[(5, "apex.normalization.FusedRMSNorm")]
    assert "--unsafe" in named[(3, "apex.normalization.FusedLayerNorm")]  # the import stays with its uses
    assert native(src, unsafe=True) == (
        "import torch\nimport torch.nn as nn\n\n"
        "norms = nn.ModuleList([torch.nn.LayerNorm(8, eps=1e-6), torch.nn.RMSNorm(8, eps=1e-5)])\n")


# ------------------------------------------------------------------ golden: what is named, and why

NAMED = {
    "bias_correction=False: AdamW always corrects": (
        "import torch\nfrom apex.optimizers import FusedAdam\nopt = FusedAdam(p, bias_correction=False)\n",
        (3, "apex.optimizers.FusedAdam"), "`bias_correction=False`"),
    "adam_w_mode not a literal": (
        "import torch\nfrom apex.optimizers import FusedAdam\nopt = FusedAdam(p, adam_w_mode=args.adamw)\n",
        (3, "apex.optimizers.FusedAdam"), "not a literal"),
    "a use that is not a call keeps the import and the other uses": (
        "import torch\nfrom apex.optimizers import FusedAdam\nopt = FusedAdam(p)\nassert isinstance(opt, FusedAdam)\n",
        (3, "apex.optimizers.FusedAdam"), "line 4"),
    "apex.amp wraps the optimizer": (
        "import torch\nfrom apex import amp\nfrom apex.optimizers import FusedAdam\nopt = FusedAdam(m.parameters())\n"
        "m, opt = amp.initialize(m, opt, opt_level='O2')\n",
        (4, "apex.optimizers.FusedAdam"), "apex.amp (line 5)"),
    "apex DDP under apex.amp (half gradients: apex all-reduces then divides, torch divides first)": (
        "import torch\nimport apex\nmodel, opt = apex.amp.initialize(model, opt, opt_level='O2')\n"
        "model = apex.parallel.DistributedDataParallel(model)\n",
        (4, "apex.parallel.DistributedDataParallel"), "apex.amp (line 3)"),
    "apex DDP's own methods": (
        "import torch\nfrom apex.parallel import DistributedDataParallel as DDP\nnet = DDP(net)\n"
        "net.disable_allreduce()\n",
        (3, "apex.parallel.DistributedDataParallel"), ".disable_allreduce"),
    "apex DDP averaging differently": (
        "import torch\nfrom apex.parallel import DistributedDataParallel as DDP\n"
        "net = DDP(net, gradient_predivide_factor=8.0)\n",
        (3, "apex.parallel.DistributedDataParallel"), "`gradient_predivide_factor=8.0`"),
    "channel_last SyncBatchNorm conversion": (
        "import torch\nimport apex\nnet = apex.parallel.convert_syncbn_model(net, channel_last=True)\n",
        (3, "apex.parallel.convert_syncbn_model"), "`channel_last=True`"),
    "a fallback binding the same name": (
        "import torch\ntry:\n    from apex.optimizers import FusedAdam\nexcept ImportError:\n"
        "    FusedAdam = torch.optim.AdamW\nopt = FusedAdam(p)\n",
        (3, "apex.optimizers.FusedAdam"), "also bound at line 5"),
    "import apex also used for amp: the whole statement stays": (
        "import torch\nimport apex\nopt = apex.optimizers.FusedSGD(p, 0.1)\n"
        "model, opt = apex.amp.initialize(model, opt)\n",
        (2, "apex"), "apex.amp.initialize (line 4)"),
    "FusedLAMB: no torch LAMB": (
        "import torch\nfrom apex.optimizers import FusedLAMB\nopt = FusedLAMB(p)\n",
        (3, "apex.optimizers.FusedLAMB"), "torch has no LAMB"),
    "flash_attn_func: SDPA's causal alignment differs": (
        "import torch\nfrom flash_attn import flash_attn_func\nout = flash_attn_func(q, k, v, causal=True)\n",
        (3, "flash_attn.flash_attn_func"), "seqlen_q == seqlen_k"),
    "xformers": (
        "import torch\nimport xformers.ops as xops\nout = xops.memory_efficient_attention(q, k, v)\n",
        (3, "xformers.ops.memory_efficient_attention"), "no one SDPA spelling"),
}


@pytest.mark.parametrize("case", list(NAMED))
def test_port_names_what_it_does_not_rewrite_with_why(case):
    src, key, why = NAMED[case]
    named = left(src)
    assert why in named[key], named
    assert port(src).unsafe_skipped == 0  # --unsafe would not rewrite these either
    assert port(src, unsafe=True).text == src


# ------------------------------------------------------------------ equivalence (apex served by transfer = original)

OPTIMIZERS = {
    "FusedAdam defaults": "import torch\nfrom apex.optimizers import FusedAdam\n\n\ndef make_optimizer(model):\n"
                          "    return FusedAdam(model.parameters(), lr=1e-2)\n",
    "FusedAdam positional, betas, eps, decay": "import torch\nfrom apex.optimizers import FusedAdam\n\n\n"
                                               "def make_optimizer(model):\n    return FusedAdam(model.parameters(), "
                                               "1e-2, True, (0.8, 0.99), 1e-6, weight_decay=0.05)\n",
    "FusedAdam adam_w_mode=False (L2)": "import torch\nimport apex\n\n\ndef make_optimizer(model):\n"
                                        "    return apex.optimizers.FusedAdam(model.parameters(), lr=1e-2, "
                                        "weight_decay=0.05, adam_w_mode=False, set_grad_none=False)\n",
    "FusedSGD nesterov": "import torch\nfrom apex.optimizers import FusedSGD\n\n\ndef make_optimizer(model):\n"
                         "    return FusedSGD(model.parameters(), 0.05, 0.9, weight_decay=1e-3, nesterov=True)\n",
    "FusedSGD dampening": "import torch\nfrom apex.optimizers import FusedSGD\n\n\ndef make_optimizer(model):\n"
                          "    return FusedSGD(model.parameters(), lr=0.05, momentum=0.9, dampening=0.3, "
                          "weight_decay=1e-3, wd_after_momentum=False)\n",
}


def _load(text, name):
    namespace = {"__name__": name}
    exec(compile(text, f"{name}.py", "exec"), namespace)
    return namespace


def _train(build, make_optimizer=None, steps=6):
    torch.manual_seed(0)
    model = build()
    opt = make_optimizer(model) if make_optimizer else torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(16, 6, generator=gen), torch.randn(16, 3, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    return model, model(torch.randn(4, 6, generator=gen))


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _same(a, b):
    (model_a, out_a), (model_b, out_b) = a, b
    state_a, state_b = model_a.state_dict(), model_b.state_dict()
    assert list(state_a) == list(state_b)
    for name in state_a:
        torch.testing.assert_close(state_a[name], state_b[name], rtol=1e-5, atol=1e-6, msg=name)
    torch.testing.assert_close(out_a, out_b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", list(OPTIMIZERS))
def test_ported_optimizer_trains_as_apex(cpu_target, case):
    src = OPTIMIZERS[case]
    original, ported = _load(src, "original"), _load(native(src), "ported")
    assert type(original["make_optimizer"](_mlp())).__module__.startswith("apex")
    _same(_train(_mlp, original["make_optimizer"]), _train(_mlp, ported["make_optimizer"]))


MODELS = {
    "convert_syncbn_model": ("import torch.nn as nn\nfrom apex.parallel import convert_syncbn_model\n\n\n"
                             "def build_model():\n    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8, "
                             "momentum=0.3), nn.ReLU(), nn.Linear(8, 3))\n    return convert_syncbn_model(model)\n",
                             False),
    "SyncBatchNorm": ("import torch.nn as nn\nimport apex\n\n\ndef build_model():\n    return nn.Sequential("
                      "nn.Linear(6, 8), apex.parallel.SyncBatchNorm(8, 1e-4, 0.2), nn.ReLU(), nn.Linear(8, 3))\n",
                      False),
    "FusedLayerNorm, FusedRMSNorm (--unsafe), outside autocast": (
        "import torch.nn as nn\nfrom apex.normalization import FusedLayerNorm, FusedRMSNorm\n\n\n"
        "def build_model():\n    return nn.Sequential(nn.Linear(6, 8), FusedLayerNorm(8), nn.Linear(8, 8), "
        "FusedRMSNorm(8, elementwise_affine=True), nn.Linear(8, 3))\n", True),
}


@pytest.mark.parametrize("case", list(MODELS))
def test_ported_model_trains_as_apex(cpu_target, case):
    src, unsafe = MODELS[case]
    if "RMSNorm" in src and not hasattr(torch.nn, "RMSNorm"):
        pytest.skip(f"torch.nn.RMSNorm is torch >= 2.4 (this is {torch.__version__}): port names it there")
    original, ported = _load(src, "original"), _load(native(src, unsafe), "ported")
    assert any(type(m).__module__.startswith("apex") for m in original["build_model"]().modules())
    _same(_train(original["build_model"]), _train(ported["build_model"]))


def test_norm_rewrites_are_unsafe_because_autocast_answers_differ(cpu_target):
    """Why the norms need --unsafe: under autocast apex answers in the autocast dtype, torch's modules do not
    (CUDA's autocast lists layer_norm as a float32 op; the cpu target's autocast does the same)."""
    from apex.normalization import FusedLayerNorm, FusedRMSNorm

    x = torch.randn(4, 8)
    pairs = [(FusedLayerNorm(8), torch.nn.LayerNorm(8))]
    if hasattr(torch.nn, "RMSNorm"):
        pairs.append((FusedRMSNorm(8), torch.nn.RMSNorm(8, eps=1e-5)))
    for ours, theirs in pairs:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert ours(x).dtype == torch.bfloat16 and theirs(x).dtype == torch.float32


@pytest.mark.slow
def test_ported_ddp_averages_and_keeps_buffers_as_apex(tmp_path):
    """apex DDP -> torch DDP(broadcast_buffers=False): two gloo ranks, rank-dependent parameters, buffers and
    data; the original (transfer's apex) and the ported wrapper end with the same parameters (broadcast from
    rank 0, gradients averaged) and the same rank-local buffers (never synchronised) on every rank."""
    src = ("import torch\nfrom apex.parallel import DistributedDataParallel as DDP\n\n\ndef wrap(model):\n"
           "    return DDP(model, delay_allreduce=True)\n")
    (tmp_path / "original.py").write_text(src)
    (tmp_path / "ported.py").write_text(native(src))
    env = clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port(), TRANSFER_QUIET=1)
    proc = python(os.path.join(SCRIPTS, "thirdparty", "native_ddp.py"), str(tmp_path), env=env, timeout=300)
    assert "native ddp OK" in proc.stdout, proc.stdout + proc.stderr
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for r, result in enumerate(results):
        for name, value in result["original"].items():
            torch.testing.assert_close(result["ported"][name], value, rtol=1e-5, atol=1e-6, msg=(r, name))
    params = [n for n in results[0]["original"] if "running" not in n and "num_batches" not in n]
    for name in params:  # DDP kept the ranks' parameters equal
        torch.testing.assert_close(results[0]["original"][name], results[1]["original"][name])
    assert not torch.equal(results[0]["original"]["1.running_mean"], results[1]["original"]["1.running_mean"])

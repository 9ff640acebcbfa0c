"""CUDA autocast on the cpu target: TRANSFER_CPU_AMP_DTYPE governs every spelling.

On CUDA every autocast spelling given no dtype computes in float16 (tests/oracle/cuda_recorded.json,
"autocast_default_dtype"); on the cpu target every spelling computes in the one dtype the variable
names (bfloat16 by default), custom_fwd(cast_inputs=) follows it, a bad value is refused at install,
the substitution is said once (banner, status, report), and GradScaler with bfloat16 changes no step.
"""

import warnings

import pytest
import torch
import torch.nn as nn

from conftest import clean_env, python


SPELLINGS = {
    "torch.autocast('cuda')": lambda: torch.autocast("cuda"),
    "torch.autocast(device_type='cuda')": lambda: torch.autocast(device_type="cuda"),
    "torch.autocast('cuda', dtype=torch.float16)": lambda: torch.autocast("cuda", dtype=torch.float16),
    "torch.amp.autocast('cuda', dtype=torch.float16)": lambda: torch.amp.autocast("cuda", dtype=torch.float16),
    "torch.cuda.amp.autocast()": lambda: torch.cuda.amp.autocast(),
    "torch.cuda.amp.autocast(dtype=torch.float16)": lambda: torch.cuda.amp.autocast(dtype=torch.float16),
}


def autocast_answers():
    """{spelling: (matmul dtype, is_autocast_enabled('cuda'), the autocast dtype torch reports for CUDA)}."""
    a = torch.ones(2, 2, device="cuda")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, make in SPELLINGS.items():
            with make():
                enabled = torch.is_autocast_enabled("cuda") if hasattr(torch, "get_autocast_dtype") \
                    else torch.is_autocast_enabled()
                reported = torch.get_autocast_dtype("cuda") if hasattr(torch, "get_autocast_dtype") \
                    else torch.get_autocast_gpu_dtype()
                out[name] = ((a @ a).dtype, enabled, reported, torch.get_autocast_gpu_dtype())
    return out


@pytest.mark.parametrize("setting, dtype", [("float16", torch.float16), ("fp16", torch.float16),
                                            (None, torch.bfloat16), ("bfloat16", torch.bfloat16)])
def test_the_variable_governs_every_autocast_spelling(install_cpu, setting, dtype):
    """On CUDA every spelling computes in float16 (oracle); on the cpu target every spelling computes in the
    one dtype TRANSFER_CPU_AMP_DTYPE names, and torch's state queries answer as inside a CUDA region."""
    if dtype is torch.float16 and not _cpu_float16_autocast():
        pytest.skip(f"torch {torch.__version__} has no float16 CPU autocast (install refuses it: tested in "
                    "test_cpu_target)")
    install_cpu(TRANSFER_CPU_AMP_DTYPE=setting)
    answers = autocast_answers()
    assert answers == {name: (dtype, True, dtype, dtype) for name in SPELLINGS}
    with torch.autocast("cuda", dtype=torch.bfloat16):  # an explicit bfloat16 is bfloat16 everywhere
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    assert not (torch.is_autocast_enabled("cuda") if hasattr(torch, "get_autocast_dtype")
                else torch.is_autocast_enabled())  # outside every region, as on CUDA


def _cpu_float16_autocast():
    from transfer.patches.amp import _cpu_autocast_takes_float16

    return _cpu_autocast_takes_float16()


@pytest.mark.parametrize("setting", [None, "float16"])
def test_custom_fwd_cast_inputs_follows_the_variable(install_cpu, setting):
    """custom_fwd(cast_inputs=torch.float16) casts a region's inputs to the region's dtype."""
    if setting == "float16" and not _cpu_float16_autocast():
        pytest.skip(f"torch {torch.__version__} has no float16 CPU autocast")
    install_cpu(TRANSFER_CPU_AMP_DTYPE=setting)
    custom_fwd = torch.amp.custom_fwd if hasattr(torch.amp, "custom_fwd") else None
    seen = []

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        decorate = custom_fwd(device_type="cuda", cast_inputs=torch.float16) if custom_fwd \
            else torch.cuda.amp.custom_fwd(cast_inputs=torch.float16)

        class Twice(torch.autograd.Function):
            @staticmethod
            @decorate
            def forward(ctx, x):
                seen.append((x.dtype, torch.is_autocast_enabled("cpu") if custom_fwd else torch.is_autocast_cpu_enabled()))
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                return grad * 2

        with torch.autocast("cuda"):
            Twice.apply(torch.ones(2, device="cuda"))
    expected = torch.float16 if setting == "float16" else torch.bfloat16
    assert seen == [(expected, False)]  # cast to the region's dtype, then run with autocast off


@pytest.mark.parametrize("value", ["half", "float32", "bfloat16x", "1"])
def test_an_unknown_amp_dtype_is_refused_at_install(install_cpu, value):
    import transfer

    with pytest.raises(transfer.TransferError) as raised:
        install_cpu(TRANSFER_CPU_AMP_DTYPE=value)
    message = str(raised.value)
    assert f"TRANSFER_CPU_AMP_DTYPE={value!r}" in message and "bfloat16" in message and "float16" in message
    assert not transfer.status()["active"]


SAY = """
import torch, transfer
print("STATUS", transfer.status().get("substitutions"))
print(transfer.report())
"""


@pytest.mark.parametrize("setting", [None, "float16"])
def test_the_substitution_is_said_once(setting):
    """The banner line, status() and report() name the float16 -> bfloat16 substitution, once; none is said
    where no substitution is made."""
    if setting == "float16" and not _cpu_float16_autocast():
        pytest.skip(f"torch {torch.__version__} has no float16 CPU autocast")
    env = clean_env(TRANSFER_DEVICE="cpu")
    if setting:
        env["TRANSFER_CPU_AMP_DTYPE"] = setting
    proc = python("-c", SAY, env=env, timeout=120)
    said = "float16 autocast runs as bfloat16 (TRANSFER_CPU_AMP_DTYPE=float16 keeps float16)"
    banner = [line for line in proc.stderr.splitlines() if line.startswith("transfer: CUDA calls run on cpu")]
    assert len(banner) == 1, proc.stderr
    if setting == "float16":
        assert "bfloat16" not in proc.stderr + proc.stdout
        assert "STATUS {}" in proc.stdout
        return
    assert "; float16 autocast runs as bfloat16;" in banner[0]  # the banner's short form; the report's is whole
    assert "STATUS {'float16 autocast': 'bfloat16 (TRANSFER_CPU_AMP_DTYPE=float16 keeps float16)'}" in proc.stdout
    assert f"  {said}" in proc.stdout.splitlines()


def test_grad_scaler_with_bfloat16_changes_no_step(install_cpu):
    """The decision (transfer/patches/amp.py): GradScaler stays as on CUDA (enabled, scale 2**16) and, with
    bfloat16, a step equals the unscaled step (a power-of-two scale is exact; no overflow)."""
    install_cpu(TRANSFER_CPU_AMP_DTYPE=None)
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).cuda() for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = torch.cuda.amp.GradScaler()
    x, y = torch.randn(4, 8, device="cuda"), torch.randn(4, 1, device="cuda")
    for model, optimizer, scaled in zip(models, optimizers, (True, False)):
        with torch.autocast("cuda"):
            loss = nn.functional.mse_loss(model(x).float(), y)
        if scaled:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
    assert scaler.is_enabled() and scaler.get_scale() == 2.0 ** 16
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert torch.equal(a, b)

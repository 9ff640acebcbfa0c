"""The TRANSFER_* switches are read one way (transfer.switches) and a bad value stops the install.

The yes/no switches (TRANSFER_STRICT, TRANSFER_QUIET) read 1/true/yes/on and 0/false/no/off/empty in
any case; any other value raises before anything is patched. TRANSFER_DISABLE names are areas or patches
of this target and torch; a misspelled one raises with the valid names and the closest, also through
the environment way in.
"""

import logging

import pytest
import torch

import transfer
from conftest import clean_env, python
from transfer.errors import TransferError, UnsupportedCudaAPI


# --- yes/no switches

@pytest.mark.parametrize("value", ["1", "true", "YES", " on "])
def test_strict_true_spellings(install_cpu, value):
    install_cpu(TRANSFER_STRICT=value)
    with pytest.raises(UnsupportedCudaAPI):
        torch.cuda.max_memory_allocated()


@pytest.mark.parametrize("value", ["0", "false", "No", "off", ""])
def test_strict_false_spellings(install_cpu, value):
    install_cpu(TRANSFER_STRICT=value)
    torch.cuda.max_memory_allocated()  # a placeholder with a warning, no error


@pytest.mark.parametrize("name", ["TRANSFER_STRICT", "TRANSFER_QUIET"])
def test_a_bad_switch_value_raises_before_anything_is_patched(install_cpu, name):
    with pytest.raises(TransferError, match=f"{name}='ture' is not a yes/no value"):
        install_cpu(**{name: "ture"})
    assert not torch.cuda.is_available() and transfer.status()["active"] is False


@pytest.mark.parametrize("value,shown", [("0", True), ("false", True), ("off", True), ("", True), ("1", False),
                                         ("yes", False)])
def test_quiet_spellings(monkeypatch, caplog, value, shown):
    transfer.uninstall()
    monkeypatch.setenv("_TRANSFER_SAID", "")
    monkeypatch.delenv("_TRANSFER_SAID")  # the banner has not been said in this job; restored after
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("TRANSFER_QUIET", value)
    caplog.set_level(logging.INFO, logger="transfer")
    try:
        transfer.install("cpu")
    finally:
        transfer.uninstall()
    banners = [r for r in caplog.records if "CUDA calls run on cpu" in r.getMessage()]
    assert len(banners) == (1 if shown else 0)


# --- TRANSFER_DISABLE names

def test_a_misspelled_disable_name_raises_with_the_valid_names(install_cpu):
    with pytest.raises(TransferError) as info:
        install_cpu(TRANSFER_DISABLE="tensor.is_cuad,factories")
    message = str(info.value)
    assert f"'tensor.is_cuad' is not an area or patch of transfer for the cpu target on torch {torch.__version__}" \
        in message and "did you mean 'tensor.is_cuda'?" in message
    assert "tensor.to" in message and "cuda_namespace" in message  # the area's patches, every area
    assert not torch.cuda.is_available() and "is_cuda" not in torch.Tensor.__dict__  # nothing left patched
    with pytest.raises(TransferError, match="did you mean 'factories.zeros'"):
        install_cpu(TRANSFER_DISABLE="factory.zeros")
    assert install_cpu(TRANSFER_DISABLE="tensor.is_cuda, factories,")["disabled"] == ["factories", "tensor.is_cuda"]


def test_a_misspelled_disable_name_stops_the_environment_way_in():
    proc = python("-c", "import torch", env=clean_env(TRANSFER_DEVICE="cpu", TRANSFER_DISABLE="shutdwn"),
                  check=False)
    assert proc.returncode != 0 and "did you mean 'shutdown'?" in proc.stderr, proc.stderr

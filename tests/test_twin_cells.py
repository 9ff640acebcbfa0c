"""The C frames' contract with their Python twins: the closure cells they share.

A C stand-in (transfer/_fastcalls.c) reads its twin's memos from the twin's own closure cells,
found by name. The names are declared once, beside the twins (`patches._calls.TWIN_CELLS`); here
each twin is checked to have them as free variables, each stand-in to hold exactly those cells in
the declared order (``__transfer_cells__``), and the memo the twin's slow path writes to be what
the C frame then answers with.
"""

import pytest
import torch

import transfer
from transfer import fastcalls
from transfer.patches import _calls

needs_ext = pytest.mark.skipif(fastcalls.TYPE is None, reason="transfer._fastcalls is not built here "
                                "(`python setup.py build_ext --inplace`)")


def _stand_ins():
    """(kind, stand-in) of each kind that reads cells, built as the areas build them on the cpu target."""
    ctx = transfer._active
    return [
        # TO wraps a vendor's Tensor.to; on the cpu target its twin is built over torch's own
        (fastcalls.TO, _calls.device_first(ctx, "Tensor.to", torch.Tensor.to.__wrapped__, to_signature=True)),
        (fastcalls.TO_COPY, torch.Tensor.to),  # the cpu target's Tensor.to copies moves
        (fastcalls.DRAWING, torch.randn),  # the cpu target's random factories draw from the device's generator
    ]


@pytest.fixture
def fast_cpu(monkeypatch):
    transfer.uninstall()
    for name in ("TRANSFER_DISABLE", "TRANSFER_STRICT", "TRANSFER_CPU_DEVICES", "LOCAL_WORLD_SIZE",
                 "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRANSFER_QUIET", "1")
    monkeypatch.setenv("TRANSFER_NO_FASTCALLS", "0")
    transfer.install("cpu")
    yield
    transfer.uninstall()


def test_every_kind_that_reads_cells_declares_them():
    assert set(_calls.TWIN_CELLS) == {fastcalls.TO, fastcalls.TO_COPY, fastcalls.DRAWING}


@needs_ext
def test_each_stand_in_holds_its_twins_declared_cells(fast_cpu):
    for kind, fast in _stand_ins():
        assert fastcalls.is_fast(fast), kind
        twin = fastcalls.python_of(fast)
        names = _calls.TWIN_CELLS[kind]
        assert set(names) <= set(twin.__code__.co_freevars), (kind, twin.__code__.co_freevars)
        declared = [twin.__closure__[twin.__code__.co_freevars.index(n)] for n in names]
        held = [c for c in fast.__transfer_cells__ if c is not None]
        assert len(held) == len(declared) and all(a is b for a, b in zip(held, declared)), kind


@needs_ext
def test_the_memo_the_twin_writes_is_what_the_c_frame_answers_with(fast_cpu):
    x = torch.ones(2)
    to = dict(_stand_ins())[fastcalls.TO]
    last = to.__transfer_cells__[0]
    assert to(x, "cuda:1").device == torch.device("cpu")  # the twin's slow path writes the memo
    argument, translation = last.cell_contents
    assert argument == "cuda:1", last.cell_contents
    # the C frame answers the repeated call from the cell, with the memo's translation
    assert to(x, argument).device == torch.device("cpu") and last.cell_contents == (argument, translation)


@needs_ext
def test_a_twin_without_a_declared_cell_fails_at_build_with_its_name(monkeypatch):
    monkeypatch.setenv("TRANSFER_NO_FASTCALLS", "0")

    def twin(*args):
        return memo

    memo = None
    with pytest.raises(ValueError, match="no free variable 'last'.*TWIN_CELLS"):
        fastcalls.stand_in(fastcalls.DRAWING, twin, torch.randn, cells=("last",))

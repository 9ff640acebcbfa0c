"""Device strings are parsed exactly as torch parses them.

`transfer.device_grammar` against ``torch.device`` (the same C++ on every build) over generated strings;
`transfer.devices.parse_cuda` names a CUDA device exactly where torch.device gives type 'cuda'; the
strings a real GPU rejected (tests/oracle/cuda_recorded.json, "device_strings_rejected") are rejected;
`transfer scan` reads device strings with the same grammar.
"""

import os
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oracle.cuda_recorded import value as recorded
from transfer import device_grammar
from transfer.devices import parse_cuda


SETTINGS = settings(max_examples=int(os.environ.get("TRANSFER_PARSE_EXAMPLES", "400")), deadline=None,
                    derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])

#: The first four raised RuntimeError on a real GPU (tests/oracle/cuda_recorded.json, "device_strings_rejected");
#: the rest are of the same families.
MALFORMED = ["CUDA:0", " cuda", "cuda:01", "cuda:\u00b2", "Cuda", "cuda ", "cuda:0 ", "cuda:", "cuda:+1", "cuda:-1",
             "cuda:0:0", "cuda::0", "cuda:\u0663", "cuda:0x1", "cuda,0", "\uff43uda", "cuda:99999999999"]


def torch_types():
    """The device type names this torch knows, from torch's own error message."""
    try:
        torch.device("no_such_device_type")
    except RuntimeError as exc:
        listed = re.search(r"Expected one of (.*) device type at start", str(exc)).group(1)
        return tuple(listed.split(", "))
    raise AssertionError("torch accepted an unknown device type")


def torch_verdict(text):
    """(type, index), or the error torch.device raises."""
    try:
        device = torch.device(text)
    except Exception as exc:  # the type is part of the verdict
        return exc
    return device.type, device.index


NAMES = st.sampled_from(["cuda", "cpu", "meta", "xla", "mps", "privateuseone", "CUDA", "Cuda", "cUDA", "npu", "_",
                         "cuda_", "cu da", "", "c", "\u0441uda", "\uff43uda", "cud\u0430"])
INDEXES = st.one_of(st.integers(0, 300).map(str), st.integers(2 ** 31 - 3, 2 ** 31 + 3).map(str),
                    st.sampled_from(["", "0", "00", "01", "007", "+1", "-1", " 1", "1 ", "\u00b2", "\u0663", "1\u00b2",
                                     "0x1", "1e3", "1_0", ":0", "0:", "9" * 30]),
                    st.text(alphabet="0123456789", min_size=1, max_size=12))
SPACE = st.sampled_from(["", "", "", " ", "\t", "\n", "\x00", "\u00a0"])


@st.composite
def device_strings(draw):
    if draw(st.integers(0, 4)) == 0:
        return draw(st.text(max_size=12))  # anything at all
    text = draw(NAMES)
    if draw(st.booleans()):
        text += ":" + draw(INDEXES)
    return draw(SPACE) + text + draw(SPACE)


@SETTINGS
@given(text=device_strings())
def test_grammar_is_torch_device(text):
    """device_grammar.parse gives torch.device's (type, index), and raises (torch's words) where it raises."""
    want = torch_verdict(text)
    try:
        got = device_grammar.parse(text, torch_types())
    except device_grammar.DeviceStringError as exc:
        assert isinstance(want, RuntimeError), (text, want)
        comparable = "\x00" not in text and not any(0xD800 <= ord(c) < 0xE000 for c in text)
        if comparable:  # torch truncates at NUL and cannot encode lone surrogates: its message differs
            assert str(exc) == str(want), text
        return
    assert got == want, text


@SETTINGS
@given(text=device_strings())
def test_parse_cuda_is_torch_device_for_strings(text):
    """A string names a CUDA device for transfer exactly when torch.device gives type 'cuda'."""
    want = torch_verdict(text)
    expected = (want[1],) if isinstance(want, tuple) and want[0] == "cuda" else None
    assert parse_cuda(text) == expected, (text, want)


@SETTINGS
@given(kind=st.sampled_from(["cuda", "cpu", "meta"]), index=st.one_of(st.none(), st.integers(0, 127)),
       number=st.integers(-3, 300))
def test_parse_cuda_devices_and_ints(kind, index, number):
    """torch.device objects: CUDA by their type; an int is a CUDA ordinal ('Tensor Attributes': a device
    ordinal is a CUDA device; a negative one is rejected later, as torch.device(-1) rejects it)."""
    device = torch.device(kind) if index is None else torch.device(kind, index)
    assert parse_cuda(device) == ((device.index,) if kind == "cuda" else None)
    assert parse_cuda(number) == (number,)
    assert parse_cuda(bool(number % 2)) is None and parse_cuda(float(number)) is None


def test_the_strings_a_real_gpu_rejected():
    rejected = recorded("device_strings_rejected")
    assert rejected == MALFORMED[:4]
    for text in rejected:  # RuntimeError on a real GPU
        assert parse_cuda(text) is None
        with pytest.raises(device_grammar.DeviceStringError):
            device_grammar.parse(text)
    assert parse_cuda("cuda:256") == (0,)  # torch.device('cuda:256') is cuda:0: an int8 index


def test_migrate_reads_device_strings_with_the_same_grammar():
    """`transfer scan` finds the devices torch accepts, and not the spellings it rejects."""
    from transfer.migrate import scan

    source = "\n".join(f"x.to({text!r})" for text in ["cuda", "cuda:1", *MALFORMED]) + "\ny = f'cuda:{rank}'\n"
    found = [f.line for f in scan.scan_source(source) if f.api != "compare 'cuda'"]
    assert found == [1, 2, len(MALFORMED) + 3]

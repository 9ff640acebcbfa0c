"""CUDA's own behaviour recorded on a real GPU: tests/oracle/cuda_recorded.json, read without torch.

`RECORD` is the whole file; `value(name)` one record's value; `SOURCE` the citation a test or an
expectation gives for such a value ("tests/oracle/cuda_recorded.json: <GPU>, torch <version>, <date>").
"""

import json
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_recorded.json")

with open(PATH, encoding="utf-8") as _fh:
    RECORD = json.load(_fh)

_META = RECORD["meta"]
SOURCE = f"tests/oracle/cuda_recorded.json: {_META['gpu']}, torch {_META['torch']}, {_META['date']}"


def value(name: str):
    """The recorded value of `name` (a key of the file's "records")."""
    return RECORD["records"][name]["value"]

"""Generated programs under a target, in the process that runs them (test_oracle starts it).

test_oracle.py runs this module with pytest in a child process whose TRANSFER_DEVICE names a
stand-in (a stand-in may never be imported into the suite's own process): hypothesis generates
op sequences, the child runs each under transfer and compares it with CUDA's semantics
(cuda_expected.model_program, which computes on explicit CPU generators and is the same with
or without the shim).
"""

from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, given, settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cuda_expected  # noqa: E402
import cuda_semantics  # noqa: E402
from program_strategy import programs  # noqa: E402

COUNT = int(os.environ.get("ORACLE_DEVICE_COUNT", "2"))
TENSOR_DRAWS = os.environ.get("ORACLE_TENSOR_DRAWS", "1") == "1"


@settings(max_examples=int(os.environ.get("ORACLE_EXAMPLES", "40")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow], database=None)
@given(ops=programs(tensor_draws=TENSOR_DRAWS))
def test_generated_programs(ops):
    expected = cuda_expected.model_program(ops, COUNT)
    observed = cuda_semantics.run_program(ops)
    diffs = cuda_expected.differences(observed, expected)
    assert not diffs, f"{ops}\n" + "\n".join(diffs)

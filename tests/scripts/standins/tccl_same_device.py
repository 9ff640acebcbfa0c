"""tccl quirk: two ranks on one host may not share a device index.

Launched with torch.distributed.run --nproc_per_node 2; both ranks select
``sdaa:0``. Each rank prints ``QUIRK_ERROR <message>`` and exits 0 when
init_process_group refuses, and exits 1 when it is accepted.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch_sdaa  # noqa: F401

torch.sdaa.set_device(0)
try:
    dist.init_process_group("tccl")
except RuntimeError as exc:
    # One write() below PIPE_BUF: both ranks share the pipe, and print()'s
    # separate newline write let the two lines interleave.
    os.write(1, ("QUIRK_ERROR " + str(exc).replace("\n", " ") + "\n").encode())
    sys.exit(0)
print("tccl accepted two ranks on sdaa:0", flush=True)
sys.exit(1)

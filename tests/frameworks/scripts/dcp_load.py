"""Load a distributed checkpoint written by 2 ranks into one process, as DCP's docs show it.

    python dcp_load.py CHECKPOINT_DIR

No process group: ``dcp.load`` reads every shard into the whole model. Prints one JSON line: the
parameters' devices and the sum of every loaded value.
"""

import json
import sys

import torch
import torch.distributed.checkpoint as dcp

from fsdp_train import Net


def main(checkpoint):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = Net().to(device)
    before = float(sum(p.detach().double().sum().cpu() for p in model.parameters()))
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=checkpoint)
    model.load_state_dict(state["model"])
    print(json.dumps({
        "param_devices": sorted({str(p.device) for p in model.parameters()}),
        "checksum": float(sum(v.detach().double().sum().cpu() for v in model.state_dict().values())),
        "checksum_before": before,
    }))


if __name__ == "__main__":
    main(sys.argv[1])

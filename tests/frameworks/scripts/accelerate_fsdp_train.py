"""A classifier trained with Hugging Face accelerate's FSDP plugin, as its docs configure it for GPUs.

    accelerate launch --config_file fsdp_config.yaml accelerate_fsdp_train.py OUT_DIR

The config file (written by ``accelerate config``) says ``distributed_type: FSDP``, ``fsdp_version: 2``,
``mixed_precision: bf16`` and a sharded state dict.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

from tinydata import CLASSES, FEATURES, blobs, write_result


def main(out_dir):
    accelerator = Accelerator()
    torch.manual_seed(0)
    x, y = blobs()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    totals = [p.numel() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    model.train()
    for epoch in range(3):
        for inputs, labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs), labels)
            accelerator.backward(loss)
            optimizer.step()
    local = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    local_numel = [t.numel() for t in local]
    local_devices = sorted({str(t.device) for t in local})
    state = accelerator.get_state_dict(model)  # the full state dict, gathered on rank 0
    model.eval()
    with torch.no_grad():
        accuracy = (model(x.to(accelerator.device)).argmax(1).cpu() == y).float().mean().item()
    accelerator.wait_for_everyone()
    write_result(out_dir, model, accuracy=accuracy, device=str(accelerator.device), model_class=type(model).__name__,
                 distributed_type=str(accelerator.distributed_type), mixed_precision=accelerator.mixed_precision,
                 local_numel=local_numel, total_numel=totals, local_devices=local_devices,
                 full_checksum=float(sum(v.double().sum() for v in state.values())) if state else None,
                 finished=True)
    accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1])

"""A classifier trained with Hugging Face accelerate, as written for NVIDIA GPUs.

    accelerate launch --multi_gpu --num_processes 2 [--mixed_precision fp16] accelerate_train.py OUT_DIR
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
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    model.train()
    for epoch in range(3):
        for inputs, labels in loader:
            optimizer.zero_grad()
            with accelerator.autocast():
                loss = F.cross_entropy(model(inputs), labels)
            accelerator.backward(loss)
            optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x.to(accelerator.device)).argmax(1).cpu() == y).float().mean().item()
    accelerator.wait_for_everyone()
    write_result(out_dir, model, accuracy=accuracy, device=str(accelerator.device), model_class=type(model).__name__,
                 distributed_type=str(accelerator.distributed_type), mixed_precision=accelerator.mixed_precision,
                 finished=True)
    accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1])

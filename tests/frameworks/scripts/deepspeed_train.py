"""A classifier trained with DeepSpeed ZeRO stage 1 on 2 GPUs, as written for NVIDIA GPUs.

    torchrun --nproc_per_node 2 deepspeed_train.py OUT_DIR
"""

import os
import sys

import deepspeed
import torch
import torch.nn as nn
import torch.nn.functional as F
from deepspeed.accelerator import get_accelerator
from torch.utils.data import TensorDataset

from tinydata import CLASSES, FEATURES, blobs, write_result

CONFIG = {
    "train_micro_batch_size_per_gpu": 32,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "torch_adam": True}},
    "zero_optimization": {"stage": 1},
    "steps_per_print": 1000,
}


def main(out_dir):
    deepspeed.init_distributed()
    torch.manual_seed(0)
    x, y = blobs()
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))
    engine, _, loader, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                training_data=TensorDataset(x, y), config=CONFIG)
    for epoch in range(3):
        for inputs, labels in loader:
            inputs, labels = inputs.to(engine.device), labels.to(engine.device)
            loss = F.cross_entropy(engine(inputs), labels)
            engine.backward(loss)
            engine.step()
    engine.eval()
    with torch.no_grad():
        accuracy = (engine(x.to(engine.device)).argmax(1).cpu() == y).float().mean().item()
    write_result(out_dir, engine.module, accuracy=accuracy, device=str(engine.device),
                 framework_device=get_accelerator().device_name(), zero_stage=engine.zero_optimization_stage(),
                 local_rank=int(os.environ["LOCAL_RANK"]), finished=True)


if __name__ == "__main__":
    main(sys.argv[1])

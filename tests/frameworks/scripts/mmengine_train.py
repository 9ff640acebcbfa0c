"""A classifier trained with MMEngine's Runner (launcher="pytorch", default wrapper), for NVIDIA GPUs.

    torchrun --nproc_per_node 2 mmengine_train.py OUT_DIR
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.device import get_device
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch.utils.data import Dataset

from tinydata import CLASSES, FEATURES, blobs, write_result


class Blobs(Dataset):
    def __init__(self):
        self.x, self.y = blobs()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return dict(inputs=self.x[i], labels=self.y[i])


class Net(BaseModel):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))

    def forward(self, inputs, labels=None, mode="tensor"):
        logits = self.net(inputs)
        if mode == "loss":
            return dict(loss=F.cross_entropy(logits, labels))
        if mode == "predict":
            return logits.argmax(1), labels
        return logits


def main(out_dir):
    runner = Runner(
        model=Net(),
        work_dir=out_dir,
        train_dataloader=dict(batch_size=32, dataset=Blobs(), sampler=dict(type="DefaultSampler", shuffle=True),
                              collate_fn=dict(type="default_collate")),
        optim_wrapper=dict(optimizer=dict(type="SGD", lr=0.05)),
        train_cfg=dict(by_epoch=True, max_epochs=3),
        launcher="pytorch",
        randomness=dict(seed=0),
        default_hooks=dict(checkpoint=dict(type="CheckpointHook", interval=100)),
    )
    runner.train()
    model = runner.model.module if hasattr(runner.model, "module") else runner.model
    x, y = blobs()
    device = next(model.parameters()).device
    with torch.no_grad():
        accuracy = (model(x.to(device)).argmax(1).cpu() == y).float().mean().item()
    write_result(out_dir, model, accuracy=accuracy, device=str(device), wrapper=type(runner.model).__name__,
                 framework_device=get_device(),
                 finished=True)


if __name__ == "__main__":
    main(sys.argv[1])

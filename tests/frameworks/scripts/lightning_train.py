"""A classifier trained with PyTorch Lightning on 2 GPUs, as written for NVIDIA GPUs.

    python lightning_train.py OUT_DIR ACCELERATOR(gpu|cuda) PRECISION(32-true|16-mixed)
"""

import sys

import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from tinydata import CLASSES, FEATURES, blobs, write_result


class Classifier(pl.LightningModule):
    def __init__(self, out_dir):
        super().__init__()
        self.out_dir = out_dir
        self.net = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def on_train_end(self):
        x, y = blobs()
        with torch.no_grad():
            accuracy = (self(x.to(self.device)).argmax(1).cpu() == y).float().mean().item()
        write_result(self.out_dir, self, accuracy=accuracy, device=str(self.device), finished=True)


def main(out_dir, accelerator, precision):
    pl.seed_everything(0)
    x, y = blobs()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    trainer = pl.Trainer(accelerator=accelerator, devices=2, strategy="ddp", precision=precision, max_epochs=3,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=out_dir)
    trainer.fit(Classifier(out_dir), loader)


if __name__ == "__main__":
    main(*sys.argv[1:4])

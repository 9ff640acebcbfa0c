"""A classifier trained the way accelerate's and transformers' ``*_no_trainer.py`` examples train, for NVIDIA GPUs:
``Accelerator(gradient_accumulation_steps=...)``, ``set_seed``, model, optimizer, both data loaders and the
learning-rate scheduler through ``prepare``, ``accelerator.accumulate``, ``gather_for_metrics`` for the
evaluation, ``save_state`` and the unwrapped model saved by the main process.

    accelerate launch --multi_gpu --num_processes 2 accelerate_no_trainer.py OUT_DIR
"""

import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset

from tinydata import CLASSES, FEATURES, blobs, write_result


class Classifier(nn.Module):
    """Returns what a transformers model returns to these loops: an object with ``loss`` and ``logits``."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, CLASSES))

    def forward(self, inputs, labels=None):
        logits = self.net(inputs)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return type("Output", (), {"loss": loss, "logits": logits})()


def main(output_dir):
    accelerator = Accelerator(gradient_accumulation_steps=2)
    set_seed(42)
    x, y = blobs(n=712)
    train_dataloader = DataLoader(TensorDataset(x[:512], y[:512]), batch_size=16, shuffle=True)
    eval_dataloader = DataLoader(TensorDataset(x[512:], y[512:]), batch_size=32)

    model = Classifier()
    no_decay = ["bias"]
    optimizer_grouped_parameters = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=5e-3)
    num_train_epochs = 3
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / accelerator.gradient_accumulation_steps)
    max_train_steps = num_train_epochs * num_update_steps_per_epoch
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: max(0.0, 1.0 - step / (max_train_steps * accelerator.num_processes)))

    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler)

    completed_steps = 0
    for epoch in range(num_train_epochs):
        model.train()
        total_loss = 0
        for step, (inputs, labels) in enumerate(train_dataloader):
            with accelerator.accumulate(model):
                outputs = model(inputs, labels=labels)
                loss = outputs.loss
                total_loss += loss.detach().float()
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                completed_steps += 1

        model.eval()
        correct = seen = 0
        for step, (inputs, labels) in enumerate(eval_dataloader):
            with torch.no_grad():
                outputs = model(inputs)
            predictions = outputs.logits.argmax(dim=-1)
            predictions, references = accelerator.gather_for_metrics((predictions, labels))
            correct += (predictions == references).sum().item()
            seen += references.numel()
        accuracy = correct / seen
        accelerator.print(f"epoch {epoch}: accuracy {accuracy:.4f} train_loss {total_loss.item() / len(train_dataloader):.4f}")

    accelerator.wait_for_everyone()
    accelerator.save_state(os.path.join(output_dir, "state"))
    unwrapped_model = accelerator.unwrap_model(model)
    if accelerator.is_main_process:
        accelerator.save(unwrapped_model.state_dict(), os.path.join(output_dir, "model.pt"))
    write_result(output_dir, unwrapped_model, accuracy=accuracy, seen=seen, completed_steps=completed_steps,
                 device=str(accelerator.device), distributed_type=str(accelerator.distributed_type),
                 model_class=type(model).__name__, finished=True)
    accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1])

"""The training workloads: an unmodified CUDA script and its hand port.

`CudaScript` is written exactly as a CUDA user writes it (``.cuda()``,
``'cuda'``, ``torch.cuda.*``, ``init_process_group('nccl')``); it runs under
the shim. `HandPort` is the same script ported by hand to the target
(``.to('sdaa:0')``, ``torch.sdaa.synchronize()``, ``'tccl'``; for the cpu
target ``.cpu()``-free code on the CPU, gloo, no synchronize). Both build the
same model from the same seed and run the same step.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _common as C


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


MODELS = {"mlp": MLP, "cnn": CNN}


def batches(kind: str, n: int = 8, batch: int = 32, seed: int = 0):
    """Host (CPU) batches, as a DataLoader hands them to the training loop."""
    g = torch.Generator().manual_seed(seed)
    shape = (batch, 64) if kind == "mlp" else (batch, 3, 16, 16)
    return [(torch.randn(*shape, generator=g), torch.randint(0, 10, (batch,), generator=g)) for _ in range(n)]


class CudaScript:
    """The unmodified CUDA training script (run it with the shim installed)."""

    def __init__(self, kind: str, ddp: bool = False, local_rank: int = 0):
        if ddp:
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP

            torch.cuda.set_device(local_rank)
            if not dist.is_initialized():
                dist.init_process_group(backend="nccl")
        torch.manual_seed(0)
        model = MODELS[kind]().cuda()
        if ddp:
            model = DDP(model, device_ids=[local_rank], output_device=local_rank)
        self.model = model
        self.criterion = nn.CrossEntropyLoss().cuda()
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(self, x, y):
        x = x.cuda(non_blocking=True)
        y = y.to("cuda", non_blocking=True)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.criterion(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        torch.cuda.synchronize()
        return loss.item()


class HandPort:
    """The same script ported by hand to `target` (run it with the shim uninstalled).

    With `share`, the step runs on the model, loss and optimizer that `share`
    (a `CudaScript`) built, so the two scripts differ in the step's spelling
    and in the shim's presence only, not in which objects they train.
    """

    def __init__(self, kind: str, target: str, ddp: bool = False, local_rank: int = 0, share=None):
        self.cpu = target == "cpu"
        self.device = torch.device("cpu") if self.cpu else torch.device(target, local_rank)
        self.sync = None if self.cpu else getattr(torch, target).synchronize
        if share is not None:
            self.model, self.criterion, self.optimizer = share.model, share.criterion, share.optimizer
            return
        if ddp:
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP

            if not self.cpu:
                getattr(torch, target).set_device(local_rank)
            if not dist.is_initialized():
                dist.init_process_group(backend=C.BACKENDS[target])
        torch.manual_seed(0)
        model = MODELS[kind]().to(self.device)
        if ddp:
            model = DDP(model) if self.cpu else DDP(model, device_ids=[local_rank], output_device=local_rank)
        self.model = model
        self.criterion = nn.CrossEntropyLoss().to(self.device)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(self, x, y):
        device, copy = self.device, self.cpu  # cpu: the batch is copied, as CUDA copies it to the device
        x = x.to(device, non_blocking=True, copy=copy)
        y = y.to(device, non_blocking=True, copy=copy)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.criterion(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        if self.sync is not None:
            self.sync()
        return loss.item()

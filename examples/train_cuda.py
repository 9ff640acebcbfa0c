"""Single-GPU training of a small CNN, written for CUDA.

Mixed precision, cudnn flags, CUDA events for timing, pinned-memory loading and
a checkpoint round trip. Runs as is on a CUDA machine.
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 2)
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def synthetic_data(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(n, 3, 16, 16, generator=g)
    labels = (images.mean(dim=(1, 2, 3)) > 0).long() + 2 * (images[:, 0].mean(dim=(1, 2)) > 0).long()
    return TensorDataset(images, labels)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--workdir", default="./cuda_runs")
    parser.add_argument("--amp", action="store_true", default=True)
    args = parser.parse_args()
    t0 = time.time()
    assert torch.cuda.is_available(), "this script needs a GPU"
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = False
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)

    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    print(f"GPU: {torch.cuda.get_device_name(0)} ({torch.cuda.device_count()} visible)")

    loader = DataLoader(synthetic_data(), batch_size=args.batch_size, shuffle=True, pin_memory=True,
                        num_workers=0, generator=torch.Generator().manual_seed(0))
    model = Net().cuda()
    criterion = nn.CrossEntropyLoss().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp)

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.reset_peak_memory_stats()
    for epoch in range(args.epochs):
        model.train()
        start.record()
        total = 0.0
        for images, labels in loader:
            images = images.to("cuda", non_blocking=True)
            labels = labels.cuda(non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with torch.cuda.amp.autocast(enabled=args.amp):
                loss = criterion(model(images), labels)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total += loss.item() * images.size(0)
        end.record()
        torch.cuda.synchronize()
        print(f"epoch {epoch}: loss {total / len(loader.dataset):.4f} "
              f"time {start.elapsed_time(end):.1f} ms "
              f"max mem {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")

    os.makedirs(args.workdir, exist_ok=True)
    path = os.path.join(args.workdir, "cuda_model_best.pt")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "cuda_version": torch.version.cuda}, path)

    restored = Net().cuda()
    checkpoint = torch.load(path, map_location="cuda:0")
    restored.load_state_dict(checkpoint["model"])
    restored.eval()
    model.eval()
    with torch.no_grad():
        probe = torch.randn(8, 3, 16, 16, device="cuda")
        same = torch.equal(model(probe), restored(probe))
    print(f"checkpoint {path} reloaded; outputs identical: {same}")
    if not same:
        raise SystemExit("checkpoint round trip changed the model")

    print(f"done in {time.time() - t0:.2f}s")


if __name__ == "__main__":
    main()

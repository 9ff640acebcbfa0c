"""A training script with CUDA graphs as NVIDIA's DeepLearningExamples and the MLPerf reference
trainers use them: the model's forward and backward captured once with
torch.cuda.make_graphed_callables (after warm-up iterations on a side stream), mixed precision with
torch.cuda.amp (autocast without its weight cache, as graphs require) and GradScaler, a DataLoader
copying each batch into the graph's static input, a fused-capable AdamW stepping eagerly, a
learning-rate schedule and an evaluation pass. --cuda-graphs off runs the same steps eagerly.

Usage: python graphed_trainer.py [--cuda-graphs on|off] [--amp] [--epochs N]
"""
import argparse
import hashlib

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(nn.Module):
    def __init__(self, d_in=16, hidden=64, classes=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.LayerNorm(hidden), nn.GELU(),
                                 nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


def dataset(n, generator):
    x = torch.randn(n, 16, generator=generator)
    y = (x[:, :4].argmax(dim=1)).long()
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda-graphs", default="on", choices=["on", "off"])
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    gen = torch.Generator().manual_seed(1)
    train = DataLoader(dataset(256, gen), batch_size=args.batch_size, shuffle=True, drop_last=True,
                       pin_memory=True, generator=torch.Generator().manual_seed(2))
    val = DataLoader(dataset(128, gen), batch_size=64, pin_memory=True)

    model = Classifier().to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=args.epochs * len(train))
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp)

    def step_fn(x, y):
        with torch.cuda.amp.autocast(enabled=args.amp, cache_enabled=False):
            return criterion(model(x), y)

    forward = model
    if args.cuda_graphs == "on":
        sample = torch.randn(args.batch_size, 16, device=device)
        # DeepLearningExamples: warm up on a side stream before capture
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                with torch.cuda.amp.autocast(enabled=args.amp, cache_enabled=False):
                    model(sample).float().sum().backward()
                model.zero_grad(set_to_none=True)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.amp.autocast(enabled=args.amp, cache_enabled=False):
            forward = torch.cuda.make_graphed_callables(model, (sample,))

    losses = []
    for epoch in range(args.epochs):
        model.train()
        total = 0.0
        for x, y in train:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with torch.cuda.amp.autocast(enabled=args.amp, cache_enabled=False):
                loss = criterion(forward(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            total += loss.item()
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in val:
                x, y = x.to(device), y.to(device)
                correct += (model(x).argmax(1) == y).sum().item()
        losses.append(round(total / len(train), 6))
        print(f"epoch {epoch} loss {losses[-1]} accuracy {correct / len(val.dataset):.4f}", flush=True)
    digest = hashlib.sha256(b"".join(p.detach().float().cpu().numpy().tobytes() for p in model.parameters()))
    print("losses", " ".join(map(str, losses)))
    print("parameters", digest.hexdigest()[:16], "on", next(model.parameters()).device)
    print("learned", losses[-1] < losses[0] * 0.7)


if __name__ == "__main__":
    main()

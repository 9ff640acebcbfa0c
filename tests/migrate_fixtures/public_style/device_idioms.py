"""A small regression trainer written the way single-GPU research scripts are: the device chosen once,
passed around as a string or a torch.device, with the usual availability checks."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--device", type=str, default="cuda" if torch.cuda.is_available() else "cpu")
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--checkpoint", default="/data/cuda_runs/last.pt")  # a path, not a device
args = parser.parse_args()

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if not torch.cuda.is_available() and args.device == "cuda":
    raise SystemExit("--device cuda requested but CUDA is not available")
amp_dtype = torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32


def make_batch(generator, device="cuda"):
    x = torch.randn(16, 8, generator=generator).to(device)
    return x, (x.sum(dim=1, keepdim=True) * 0.5).to(device)


def evaluate(model, device="cuda"):
    model.eval()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        x, y = make_batch(g, device)
        return F.mse_loss(model(x), y).item()


def main():
    print("using device: cuda" if args.device == "cuda" else "using device: cpu")  # a log message
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        x, y = make_batch(g, args.device)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step}: loss {loss.item():.6f}")
    print(f"eval loss {evaluate(model, args.device):.6f}")
    if device.type == "cuda":
        torch.cuda.synchronize()
    print("parameters on", next(model.parameters()).device.type)


if __name__ == "__main__":
    main()

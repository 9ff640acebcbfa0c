"""nn.DataParallel over every visible GPU, MNIST-shaped synthetic data.

The single-process, multi-GPU idiom: wrap the model, move it with .cuda(),
feed whole batches (DataParallel splits them across the GPUs), save
model.module's weights and reload them onto the main GPU.

Run: python data_parallel.py --workdir ./runs
"""
import argparse
import hashlib
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc1 = nn.Linear(16 * 5 * 5, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def fake_mnist(n=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g))


def parameters_digest(module):
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(repr(tensor.detach().cpu().flatten().tolist()).encode())
    return h.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default="./runs")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)

    torch.manual_seed(0)
    gpus = torch.cuda.device_count()
    print(f"Let's use {gpus} GPUs!")
    model = nn.DataParallel(Net()).cuda()  # all visible GPUs, output on cuda:0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(fake_mnist(), batch_size=32, shuffle=True, pin_memory=True,
                        generator=torch.Generator().manual_seed(0))

    model.train()
    for epoch in range(args.epochs):
        for step, (data, target) in enumerate(loader):
            data, target = data.cuda(), target.cuda()
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")

    path = os.path.join(args.workdir, "mnist_dp.pth")
    torch.save(model.module.state_dict(), path)
    restored = Net().cuda()
    restored.load_state_dict(torch.load(path, map_location="cuda"))
    same = all(torch.equal(a, b) for a, b in zip(model.module.state_dict().values(), restored.state_dict().values()))
    print(f"reloaded on {next(restored.parameters()).device}: identical {same}")
    print(f"parameters {parameters_digest(model.module)} on {next(model.module.parameters()).device}")
    if not same:
        raise SystemExit("reloaded weights differ")


if __name__ == "__main__":
    main()

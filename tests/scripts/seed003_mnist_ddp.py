# The DDP flow of seed 003 (a user's notes on DP/DDP MNIST training), written out as a runnable script:
# environment-variable init under a launcher, the device chosen as "cuda:{}".format(local_rank),
# SyncBatchNorm, DDP(model, device_ids=[device], output_device=device), a resumable checkpoint dict
# saved on rank 0 (model.module's weights) and loaded with map_location=device, all_reduce of the loss.
# Changes from the notes, each the smallest that lets it run here: the data is a fixed synthetic
# MNIST-sized set (no download), resnet34 becomes a small conv net, tensorboard/tqdm are prints.
#
# Launch: python -m torch.distributed.launch --nproc_per_node 2 --use_env seed003_mnist_ddp.py
#     or: torchrun --nproc_per_node 2 seed003_mnist_ddp.py --log-dir ./runs
import argparse
import hashlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc = nn.Linear(16 * 5 * 5, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


def mnist_like(n=256):
    g = torch.Generator().manual_seed(3)
    images = torch.randn(n, 1, 28, 28, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    return TensorDataset(images, labels)


def digest(module):
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(repr(tensor.detach().cpu().flatten().tolist()).encode())
    return h.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--syncBN", type=bool, default=True)
    parser.add_argument("--log-dir", default="./runs")
    parser.add_argument("--resume-path", default="")
    args = parser.parse_args()

    # 读取环境参数 [read the launcher's environment]
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group(backend="nccl", init_method="env://", world_size=world_size, rank=rank)

    # 方式2：设置本进程所使用的device [way 2: one device object used everywhere]
    torch.cuda.set_device("cuda:{}".format(local_rank))
    device = torch.device("cuda:{}".format(local_rank))

    dataset = mnist_like()
    train_sampler = DistributedSampler(dataset=dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    train_loader = DataLoader(dataset, batch_size=32, sampler=train_sampler, pin_memory=True, num_workers=0)

    torch.manual_seed(0)
    model = Net(num_classes=10).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start_epoch = 0
    if args.resume_path and os.path.exists(args.resume_path):
        # map_location设置local_rank设备可以防止cuda:0的显存爆炸 [map to this rank's device]
        checkpoint = torch.load(args.resume_path, map_location=device)
        start_epoch = checkpoint["start_epoch"] + 1
        optimizer.load_state_dict(checkpoint["Optimizer_state_dict"])
        model.load_state_dict(checkpoint["model_state_dict"], strict=False)
        print("resuming from {}".format(args.resume_path))

    if args.syncBN:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model).to(device)
    # 注意model参数必须已经在device_ids的GPU上了 [parameters must already be on the device]
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device], output_device=device)

    os.makedirs(args.log_dir, exist_ok=True)
    for epoch in range(start_epoch, args.epochs):
        train_sampler.set_epoch(epoch)
        model.train()
        total = torch.zeros(1).to(device)
        correct = torch.zeros(1).to(device)
        for images, labels in train_loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            output = model(images)
            loss = F.cross_entropy(output, labels)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            correct += (output.argmax(1) == labels).sum()
        dist.all_reduce(total)
        dist.all_reduce(correct)
        if rank == 0:
            print("[epoch {}] loss: {:.5f} accuracy: {:.4f}".format(
                epoch, total.item() / (world_size * len(train_loader)), correct.item() / len(dataset)))
            state = {
                "start_epoch": epoch,
                "model_state_dict": model.module.state_dict(),  # DDP与DP一样要保存module中的权重
                "Optimizer_state_dict": optimizer.state_dict(),
            }
            torch.save(state, os.path.join(args.log_dir, "model_{}.pth".format(epoch)))
    print("rank {}: parameters {} on {}".format(rank, digest(model.module), next(model.parameters()).device))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

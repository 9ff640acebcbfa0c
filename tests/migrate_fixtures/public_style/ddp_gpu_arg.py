"""ImageNet-example style DDP training: one process per GPU, the GPU index from --gpu or LOCAL_RANK.

Launch: torchrun --nproc_per_node=NUM_GPUS ddp_gpu_arg.py
"""
import argparse
import hashlib
import os

import torch
import torch.backends.cudnn as cudnn
import torch.distributed as dist
import torch.nn as nn
import torch.utils.data
import torch.utils.data.distributed


def get_args():
    parser = argparse.ArgumentParser(description="PyTorch DDP training")
    parser.add_argument("--gpu", default=None, type=int, help="GPU id to use.")
    parser.add_argument("--local_rank", "--local-rank", default=-1, type=int)
    parser.add_argument("--dist-backend", default="nccl", type=str, help="distributed backend")
    parser.add_argument("--epochs", default=2, type=int)
    parser.add_argument("--lr", default=0.05, type=float)
    return parser.parse_args()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(self.features(x))


def digest(module):
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(repr(tensor.detach().cpu().flatten().tolist()).encode())
    return h.hexdigest()[:16]


def main():
    args = get_args()
    if args.local_rank == -1:
        args.local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if args.gpu is None:
        args.gpu = args.local_rank
    dist.init_process_group(backend=args.dist_backend, init_method="env://")
    rank = dist.get_rank()
    torch.cuda.set_device(args.gpu)
    cudnn.benchmark = True

    torch.manual_seed(0)
    model = Net()
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model.cuda(args.gpu)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
    criterion = nn.CrossEntropyLoss().cuda(args.gpu)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9)

    g = torch.Generator().manual_seed(7)
    dataset = torch.utils.data.TensorDataset(torch.randn(64, 3, 8, 8, generator=g), torch.randint(0, 5, (64,), generator=g))
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=False)
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler, pin_memory=True)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for i, (images, target) in enumerate(loader):
            images = images.cuda(args.gpu, non_blocking=True)
            target = target.cuda(args.gpu, non_blocking=True)
            loss = criterion(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        if rank == 0:
            print("epoch {}: mean loss {:.6f}".format(epoch, reduced.item() / dist.get_world_size()))
    print("rank {}: parameters {} on {}".format(rank, digest(model.module), next(model.parameters()).device))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

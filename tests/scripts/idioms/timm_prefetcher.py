"""Image classification fed by a CUDA prefetcher, as timm's train.py runs it: timm's ``PrefetchLoader``
(timm/data/loader.py: ``torch.cuda.Stream(device=device)`` with ``device=torch.device('cuda')``, the copy and the
normalisation inside ``torch.cuda.stream(stream)``, ``torch.cuda.current_stream(device=...).wait_stream(stream)``),
or NVIDIA apex's imagenet ``data_prefetcher`` (``record_stream``, events); AMP as timm's ``--amp``
(``torch.autocast(device_type=device.type, dtype=torch.float16)`` and a GradScaler on ``device.type``).

Run: python timm_prefetcher.py [--prefetcher timm|apex|none] [--amp]
"""
import argparse
from contextlib import suppress
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data

IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)


def fast_collate(batch):
    """timm's fast_collate for uint8 tensors: the images stay uint8 until the device."""
    targets = torch.tensor([b[1] for b in batch], dtype=torch.int64)
    tensor = torch.zeros((len(batch), *batch[0][0].shape), dtype=torch.uint8)
    for i in range(len(batch)):
        tensor[i].copy_(batch[i][0])
    return tensor, targets


class PrefetchLoader:

    def __init__(self, loader, mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD, channels=3,
                 device=torch.device('cuda'), img_dtype=None):
        normalization_shape = (1, channels, 1, 1)
        self.loader = loader
        self.device = device
        self.img_dtype = img_dtype or torch.float32
        self.mean = torch.tensor(
            [x * 255 for x in mean], device=device, dtype=img_dtype).view(normalization_shape)
        self.std = torch.tensor(
            [x * 255 for x in std], device=device, dtype=img_dtype).view(normalization_shape)
        self.is_cuda = device.type == 'cuda' and torch.cuda.is_available()

    def __iter__(self):
        first = True
        if self.is_cuda:
            stream = torch.cuda.Stream(device=self.device)
            stream_context = partial(torch.cuda.stream, stream=stream)
        else:
            stream = None
            stream_context = suppress

        for next_input, next_target in self.loader:

            with stream_context():
                next_input = next_input.to(device=self.device, non_blocking=True)
                next_target = next_target.to(device=self.device, non_blocking=True)
                next_input = next_input.to(self.img_dtype).sub_(self.mean).div_(self.std)

            if not first:
                yield input, target
            else:
                first = False

            if stream is not None:
                torch.cuda.current_stream(device=self.device).wait_stream(stream)

            input = next_input
            target = next_target

        yield input, target

    def __len__(self):
        return len(self.loader)


class data_prefetcher():
    """NVIDIA apex's examples/imagenet/main_amp.py prefetcher, with its events for the copy time."""

    def __init__(self, loader):
        self.loader = iter(loader)
        self.stream = torch.cuda.Stream()
        self.mean = torch.tensor([0.485 * 255, 0.456 * 255, 0.406 * 255]).cuda().view(1, 3, 1, 1)
        self.std = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255]).cuda().view(1, 3, 1, 1)
        self.copy_ms = 0.0
        self.preload()

    def preload(self):
        try:
            self.next_input, self.next_target = next(self.loader)
        except StopIteration:
            self.next_input = None
            self.next_target = None
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            start.record(self.stream)
            self.next_input = self.next_input.cuda(non_blocking=True)
            self.next_target = self.next_target.cuda(non_blocking=True)
            self.next_input = self.next_input.float()
            self.next_input = self.next_input.sub_(self.mean).div_(self.std)
            self.stream.record_event(end)
        self.copied = (start, end)

    def next(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        input = self.next_input
        target = self.next_target
        if input is not None:
            input.record_stream(torch.cuda.current_stream())
            end = self.copied[1]
            torch.cuda.current_stream().wait_event(end)
            end.synchronize()
            self.copy_ms += self.copied[0].elapsed_time(end)
        if target is not None:
            target.record_stream(torch.cuda.current_stream())
        self.preload()
        return input, target


def synthetic_images(n=256, size=16, seed=0):
    """Four classes told apart by which quadrant is bright: uint8 images, as decoded JPEGs are."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 96, (n, 3, size, size), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, 4, (n,), generator=g)
    half = size // 2
    for i, label in enumerate(labels.tolist()):
        r, c = divmod(label, 2)
        images[i, :, r * half:(r + 1) * half, c * half:(c + 1) * half] += 150
    return [(images[i], int(labels[i])) for i in range(n)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--prefetcher', default='timm', choices=['timm', 'apex', 'none'])
    parser.add_argument('--amp', action='store_true', default=False)
    parser.add_argument('--device', default='cuda')
    parser.add_argument('--epochs', type=int, default=3)
    args = parser.parse_args()

    device = torch.device(args.device)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 4))
    model.to(device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    amp_autocast = suppress
    loss_scaler = None
    if args.amp:
        amp_autocast = partial(torch.autocast, device_type=device.type, dtype=torch.float16)
        try:  # timm's NativeScaler
            loss_scaler = torch.amp.GradScaler(device=device.type)
        except (AttributeError, TypeError):
            loss_scaler = torch.cuda.amp.GradScaler()

    loader = torch.utils.data.DataLoader(synthetic_images(), batch_size=32, shuffle=True, collate_fn=fast_collate,
                                         generator=torch.Generator().manual_seed(0))
    mean = torch.tensor([x * 255 for x in IMAGENET_DEFAULT_MEAN], device=device).view(1, 3, 1, 1)
    std = torch.tensor([x * 255 for x in IMAGENET_DEFAULT_STD], device=device).view(1, 3, 1, 1)
    losses = []
    copy_ms = 0.0
    for epoch in range(args.epochs):
        model.train()
        if args.prefetcher == 'timm':
            batches = iter(PrefetchLoader(loader, device=device))
        elif args.prefetcher == 'apex':
            prefetcher = data_prefetcher(loader)
            batches = iter(prefetcher.next, (None, None))
        else:
            batches = ((x.to(device).float().sub_(mean).div_(std), y.to(device)) for x, y in loader)
        for input, target in batches:
            with amp_autocast():
                output = model(input)
                loss = F.cross_entropy(output, target)
            optimizer.zero_grad()
            if loss_scaler is not None:
                loss_scaler.scale(loss).backward()
                loss_scaler.step(optimizer)
                loss_scaler.update()
            else:
                loss.backward()
                optimizer.step()
            losses.append(loss.item())
        if args.prefetcher == 'apex':
            copy_ms += prefetcher.copy_ms
        if device.type == 'cuda':
            torch.cuda.synchronize()
        print(f"epoch {epoch}: loss {losses[-1]:.4f}")

    model.eval()
    correct = total = 0
    with torch.no_grad():
        for input, target in PrefetchLoader(loader, device=device):
            correct += (model(input).argmax(1) == target).sum().item()
            total += target.numel()
    print(f"accuracy {correct / total:.4f} losses {' '.join(f'{v:.6f}' for v in losses)}")
    print(f"parameters on {next(model.parameters()).device}, copy time measured {copy_ms >= 0.0}")


if __name__ == '__main__':
    main()

"""A small diffusion UNet trained in channels_last, as an Ascend user ports a diffusers-style trainer by hand:
``unet_block.py VENDOR`` (the device is ``<vendor>:0``; the same model, data and noise also on the CPU).

Issue 34: two diffusion UNet trainers died on the npu stand-in at GroupNorm's first call on the channels_last
conv output ("view size is not compatible with input tensor's size and stride"). The blocks follow diffusers'
ResnetBlock2D (GroupNorm -> SiLU -> Conv, time embedding added, GroupNorm -> SiLU -> Conv, 1x1 shortcut);
a strided-conv down and nearest-upsample up path; noise-prediction MSE, AdamW, gradient clipping.

Prints one ``RESULT {json}`` line: per-step losses on both, the largest parameter difference after training,
the memory format of the device's activations. The test compares them (CUDA is the oracle: the same math,
so the CPU's numbers within float32 rounding).
"""

import importlib
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

VENDOR = sys.argv[1]
importlib.import_module(f"torch_{VENDOR}")
STEPS = 4


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResnetBlock2D(nn.Module):
    def __init__(self, cin, cout, temb_channels, groups=8):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=1e-6)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb_channels, cout)
        self.norm2 = nn.GroupNorm(groups, cout, eps=1e-6)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.conv_shortcut(x) + h


class TinyUNet(nn.Module):
    def __init__(self, channels=4, width=32, temb=32):
        super().__init__()
        self.temb = temb
        self.time_mlp = nn.Sequential(nn.Linear(temb, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.conv_in = nn.Conv2d(channels, width, 3, padding=1)
        self.down = ResnetBlock2D(width, 2 * width, temb)
        self.downsample = nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1)
        self.mid = ResnetBlock2D(2 * width, 2 * width, temb)
        self.up = ResnetBlock2D(4 * width, width, temb)
        self.norm_out = nn.GroupNorm(8, width, eps=1e-6)
        self.conv_out = nn.Conv2d(width, channels, 3, padding=1)

    def forward(self, x, t):
        temb = self.time_mlp(timestep_embedding(t, self.temb))
        h = self.conv_in(x)
        skip = self.down(h, temb)
        h = self.mid(self.downsample(skip), temb)
        h = F.interpolate(h, scale_factor=2.0, mode="nearest")
        h = self.up(torch.cat([h, skip], dim=1), temb)
        return self.conv_out(F.silu(self.norm_out(h)))


def train(device, model, batches):
    model = model.to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    losses, formats = [], set()
    model.norm_out.register_forward_pre_hook(
        lambda mod, args: formats.add(args[0].is_contiguous(memory_format=torch.channels_last)))
    for clean, noise, t in batches:
        clean = clean.to(device).contiguous(memory_format=torch.channels_last)
        noise, t = noise.to(device), t.to(device)
        alpha = (1 - t.float() / 1000).view(-1, 1, 1, 1)
        noisy = alpha.sqrt() * clean + (1 - alpha).sqrt() * noise
        loss = F.mse_loss(model(noisy, t), noise)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return model, losses, formats


def main():
    torch.manual_seed(0)
    reference = TinyUNet()
    on_device = TinyUNet()
    on_device.load_state_dict(reference.state_dict())
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 4, 16, 16, generator=g), torch.randn(4, 4, 16, 16, generator=g),
                torch.randint(0, 1000, (4,), generator=g)) for _ in range(STEPS)]
    device = torch.device(VENDOR, 0)
    cpu_model, cpu_losses, _ = train("cpu", reference, batches)
    dev_model, dev_losses, formats = train(device, on_device, batches)
    params = dict(cpu_model.named_parameters())
    worst = max(((p.detach().cpu() - params[name].detach()).abs().max().item(), name)
                for name, p in dev_model.named_parameters())
    print("RESULT " + json.dumps({
        "cpu_losses": cpu_losses, "device_losses": dev_losses, "max_param_diff": worst[0], "worst_param": worst[1],
        "param_devices": sorted({str(p.device) for p in dev_model.parameters()}),
        "channels_last_activations": sorted(formats),
    }), flush=True)


if __name__ == "__main__":
    main()

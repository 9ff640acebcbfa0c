"""One DCGAN training step through ``nn.parallel.data_parallel`` over devices 0 and 1, as the CUDA script runs it.

    python data_parallel_probe.py IN.pt OUT.pt

IN holds the generator's and discriminator's weights and buffers and the noise; the step runs the
generator and the discriminator (train mode: BatchNorm on batch statistics) with ``--ngpu 2`` on cuda:0,
backward of the generator's loss. OUT gets, as CPU tensors: the fake images, the discriminator's
output, every gradient and buffer, and the devices the results were on.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "idioms"))
from dcgan_data_parallel import Discriminator, Generator  # noqa: E402


def main(source, destination):
    state = torch.load(source)
    device = torch.device("cuda:0")
    netG = Generator(2, state["nz"], state["ngf"]).to(device)
    netD = Discriminator(2, state["ndf"]).to(device)
    netG.load_state_dict(state["G"])
    netD.load_state_dict(state["D"])
    noise = state["noise"].to(device)
    fake = netG(noise)
    output = netD(fake)
    errG = nn.BCELoss()(output, torch.ones_like(output))
    errG.backward()
    torch.save({
        "fake": fake.detach().cpu(), "output": output.detach().cpu(), "fake_device": str(fake.device),
        "output_device": str(output.device),
        "grads": {f"{m}.{n}": p.grad.cpu() for m, net in (("G", netG), ("D", netD)) for n, p in net.named_parameters()},
        "buffers": {f"{m}.{n}": b.cpu() for m, net in (("G", netG), ("D", netD)) for n, b in net.named_buffers()},
    }, destination)


if __name__ == "__main__":
    main(*sys.argv[1:3])

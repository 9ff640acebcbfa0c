"""apex.parallel.SyncBatchNorm on torch.nn.SyncBatchNorm.

apex's interface: ``SyncBatchNorm(num_features, eps, momentum, affine,
track_running_stats, process_group=None, channel_last=False, fuse_relu=False)``
and ``forward(input, z=None)``: channels in the last dimension with
``channel_last``, ``z`` added to the normalized output, then ReLU with
``fuse_relu`` (apex's optimized kernel). Statistics are synchronised across
the process group by torch's SyncBatchNorm (transfer provides its kernels on
every target), unbiased running variance as apex.
"""

import torch


class SyncBatchNorm(torch.nn.SyncBatchNorm):
    warned = False

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_group=None, channel_last=False, fuse_relu=False):
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine,
                         track_running_stats=track_running_stats, process_group=process_group)
        self.channel_last = channel_last
        self.fuse_relu = fuse_relu

    def _specify_process_group(self, process_group):
        self.process_group = process_group

    def _specify_channel_last(self, channel_last):
        self.channel_last = channel_last

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input, z=None):
        channel_last = self.channel_last and input.dim() > 2
        if channel_last:
            input = input.movedim(-1, 1)
            z = None if z is None else z.movedim(-1, 1)
        out = super().forward(input)
        if z is not None:
            out = out + z
        if self.fuse_relu:
            out = torch.relu(out)
        return out.movedim(1, -1) if channel_last else out

"""Checks where a batch lives before and after moving it to the GPU."""
import torch


def on_gpu(t):
    return t.is_cuda


x = torch.randn(4, 3)
print("before:", x.is_cuda)
y = x.cuda()
checks = [on_gpu(y) for _ in range(5)]
assert all(checks), "the batch should be on the GPU"
start = torch.cuda.Event(enable_timing=True)
stream = torch.cuda.Stream()
with torch.cuda.stream(stream):
    z = y * 2
start.record()
torch.cuda.synchronize()
print("after:", checks[0], isinstance(stream, torch.cuda.Stream), z.is_cuda)

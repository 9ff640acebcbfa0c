import torch
import torch.cuda as tc
from torch import cuda
from torch.cuda.amp import autocast
import torch.distributed as dist

tc.synchronize()
cuda.empty_cache()
with autocast():
    pass
rank = 1
x = torch.zeros(2, device=f"cuda:{rank}")
y = x.to("cuda:0")
path = "/ckpt/cuda_model.pt"
if x.device.type == "cuda":
    pass
dist.init_process_group(backend="nccl")
if dist.get_backend() != "nccl":
    pass
ok = torch.cuda.get_device_capability()[0] >= 8
g = torch.cuda.CUDAGraph()

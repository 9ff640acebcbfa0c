import torch
def broken(:
    torch.cuda.synchronize()

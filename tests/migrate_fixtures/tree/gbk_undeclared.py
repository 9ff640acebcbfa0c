import torch
# ÑµÁ·
model = torch.nn.Linear(2, 2).cuda()

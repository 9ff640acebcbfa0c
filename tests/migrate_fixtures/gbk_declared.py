# -*- coding: gbk -*-
# 训练脚本
import torch
print("设备")
torch.cuda.synchronize()

# The test demo of seed 000 (a Tecorigin SDAA user's bug report), as its author meant it:
# sdaa-native DDP + SyncBatchNorm with tccl, 4 ranks under mp.spawn. Changes from the report,
# each the smallest that lets it run as intended:
#   * USE_TEST_MODEL = True and convert_sync_batchnorm enabled (the bug being reported); the
#     `else:` branches held only comments about the author's private ZeroModel (not valid Python),
#     they now raise.
#   * the loop calls ddp_model (the else branch does; calling the bare model bypasses DDP) and
#     zeroes the gradients; 1000 iterations -> 20.
#   * MASTER_ADDR/MASTER_PORT become setdefault (the test chooses a free port), and each rank
#     prints a digest of its final parameters.
#   * reproducible, so the result can be compared with one process training on the full batch:
#     every rank seeds 0 before building the model and 100 + rank before drawing its data;
#     rank 0 saves the final state_dict to the path given as the first argument, if any.
# Original comments kept (translated in brackets).
import hashlib
import os
import sys
import torch
import torch_sdaa
import torch.nn as nn
import torch.optim as optim
import torch.multiprocessing as mp
from torch.nn import functional as F
# 导入DDP所需的依赖库 [DDP imports]
# from model import ZeroModel
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

# 设置IP:PORT，框架启动TCP Store为ProcessGroup服务 [IP:PORT of the TCP store]
os.environ.setdefault('MASTER_ADDR', 'localhost')  # 设置IP
os.environ.setdefault('MASTER_PORT', '29503')      # 设置端口号

USE_TEST_MODEL = True
ITERATIONS = 20


def demo_basic(rank, world_size):
    # 必须在初始化ProcessGroup之前进行set device，tccl限制 [tccl: set_device before init]
    device = torch.device(f"sdaa:{rank}")
    torch.sdaa.set_device(device)
    # 初始化ProcessGroup，通信后端选择tccl [tccl backend]
    dist.init_process_group('tccl', rank=rank, world_size=world_size)
    # dist.init_process_group('gloo', rank=rank, world_size=world_size)

    torch.manual_seed(0)
    if USE_TEST_MODEL:
        model = nn.Linear(10, 10).to(device)  # 构造模型
        model = nn.Sequential(
            nn.Linear(10, 10),
            nn.BatchNorm1d(10),
            nn.ReLU(),
            nn.Linear(10, 10)
        ).to(device)
        # SyncBatchNorm出现: ValueError: SyncBatchNorm expected input tensor to be on GPU
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        ddp_model = DDP(model, device_ids=[rank])  # DDP model
        loss_fn = nn.MSELoss()  # 定义loss
    else:
        # 以下是我们的模型的一个单元的测试，与demo无关 [our own model's unit test]
        raise NotImplementedError("ZeroModel is the report author's private model")

    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=0.001)  # 定义优化器

    model.train()  # 设置训练模型
    torch.manual_seed(100 + rank)
    for i in range(ITERATIONS):
        if USE_TEST_MODEL:
            data = torch.randn(20, 10).to(device)  # 数据放到device上
            labels = torch.randn(20, 10).to(device)  # 标签数据放到device上
            optimizer.zero_grad()
            outputs = ddp_model(data)  # 前向计算
            loss = loss_fn(outputs, labels)  # loss计算
            loss.backward()  # loss反向传播
        else:
            raise NotImplementedError("ZeroModel is the report author's private model")

        optimizer.step()  # 更新参数
        print(f"rank:{rank}, loss:{loss.cpu().item()}")

    digest = hashlib.sha256()
    for name, tensor in sorted(ddp_model.module.state_dict().items()):
        digest.update(name.encode())
        digest.update(repr(tensor.detach().cpu().flatten().tolist()).encode())
    print(f"rank {rank}: parameters {digest.hexdigest()[:16]} on {next(model.parameters()).device}")
    if rank == 0 and len(sys.argv) > 1:
        torch.save(ddp_model.module.state_dict(), sys.argv[1])


def main(demo_fn, world_size):
    mp.spawn(demo_fn,
             args=(world_size,),
             nprocs=world_size,
             join=True)


if __name__ == "__main__":  # 主程序入口
    world_size = 4  # 4张卡进行训练 [4 cards]
    main(demo_basic, world_size)

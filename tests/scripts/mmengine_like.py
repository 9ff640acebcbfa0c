"""A small imitation of MMEngine's device and wrapping flow (seed 002).

MMEngine-style frameworks decide the device themselves: `get_device()` answers
'cuda' when torch.cuda.is_available(), else 'cpu', the runner moves the model
there, and `wrap_model` wraps it in DDP with ``device_ids=[local_rank]``. On a
machine whose accelerator the framework does not recognise, the model stays on
the CPU and DDP raises "device_ids and output_device arguments only work with
single-device/multiple-device GPU modules or CPU modules" (the seed-002 crash).

Launch: torchrun --nproc_per_node=2 mmengine_like.py --work-dir ./work_dirs
"""
import argparse
import hashlib
import os

import torch
import torch.distributed as torch_dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


# ---------------------------------------------------------------- mmengine/device/utils.py
def is_cuda_available():
    return torch.cuda.is_available()


def get_device():
    """The device the framework trains on."""
    if is_cuda_available():
        return "cuda"
    return "cpu"


# ---------------------------------------------------------------- mmengine/dist/utils.py
def init_dist(launcher, backend="nccl", **kwargs):
    if launcher != "pytorch":
        raise ValueError(f"launcher {launcher} is not supported here")
    local_rank = int(os.environ["LOCAL_RANK"])
    if get_device() == "cuda":
        torch.cuda.set_device(local_rank)
    elif backend == "nccl":
        backend = "gloo"  # no GPU: fall back to gloo
    torch_dist.init_process_group(backend=backend, **kwargs)


def get_dist_info():
    if torch_dist.is_available() and torch_dist.is_initialized():
        return torch_dist.get_rank(), torch_dist.get_world_size()
    return 0, 1


def is_distributed():
    return torch_dist.is_available() and torch_dist.is_initialized()


# ---------------------------------------------------------------- mmengine/model/wrappers
class MMDistributedDataParallel(DistributedDataParallel):
    def train_step(self, data, optim_wrapper):
        inputs, labels = data
        loss = nn.functional.cross_entropy(self(inputs), labels)
        optim_wrapper.update_params(loss)
        return {"loss": loss}


class OptimWrapper:
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def update_params(self, loss):
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()


# ---------------------------------------------------------------- mmengine/runner/runner.py
class Runner:
    def __init__(self, model, work_dir, train_dataloader, optim_cfg, env_cfg, max_iters):
        self.work_dir = work_dir
        self._env_cfg = env_cfg
        if env_cfg.get("launcher", "none") != "none":
            init_dist(env_cfg["launcher"], **env_cfg.get("dist_cfg", {}))
        self.rank, self.world_size = get_dist_info()
        self.model = self.wrap_model(env_cfg.get("model_wrapper_cfg"), model)
        self.optim_wrapper = OptimWrapper(torch.optim.SGD(self.model.parameters(), **optim_cfg))
        self.train_dataloader = train_dataloader(self.rank, self.world_size)
        self.max_iters = max_iters

    def wrap_model(self, model_wrapper_cfg, model):
        model = model.to(get_device())
        if not is_distributed():
            return model
        model_wrapper_cfg = dict(model_wrapper_cfg or {})
        model_wrapper_cfg.setdefault("broadcast_buffers", False)
        model_wrapper_cfg.setdefault("find_unused_parameters", False)
        return MMDistributedDataParallel(
            module=model, device_ids=[int(os.environ["LOCAL_RANK"])], **model_wrapper_cfg)

    def train(self):
        device = get_device()
        it = 0
        while it < self.max_iters:
            for inputs, labels in self.train_dataloader:
                data = (inputs.to(device), labels.to(device))
                outputs = self.model.train_step(data, self.optim_wrapper)
                if self.rank == 0:
                    print(f"Iter [{it + 1}/{self.max_iters}] loss: {outputs['loss'].item():.4f}")
                it += 1
                if it >= self.max_iters:
                    break
        module = self.model.module if hasattr(self.model, "module") else self.model
        print(f"rank {self.rank}: parameters {parameters_digest(module)} on {next(module.parameters()).device}")
        if self.rank == 0:
            os.makedirs(self.work_dir, exist_ok=True)
            torch.save({"state_dict": module.state_dict(), "meta": {"iter": it}},
                       os.path.join(self.work_dir, f"iter_{it}.pth"))
        if is_distributed():
            torch_dist.barrier()
            torch_dist.destroy_process_group()


def parameters_digest(module):
    """Fingerprint of the parameters (BatchNorm buffers are per rank: broadcast_buffers=False)."""
    h = hashlib.sha256()
    for name, tensor in sorted(module.named_parameters()):
        h.update(name.encode())
        h.update(repr(tensor.detach().cpu().flatten().tolist()).encode())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------- the user's config and train.py
def build_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


def build_dataloader(rank, world_size):
    g = torch.Generator().manual_seed(7)
    dataset = TensorDataset(torch.randn(64, 3, 8, 8, generator=g), torch.randint(0, 4, (64,), generator=g))
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    return DataLoader(dataset, batch_size=8, sampler=sampler)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work-dir", default="./work_dirs/toy")
    parser.add_argument("--launcher", default="pytorch" if "LOCAL_RANK" in os.environ else "none")
    args = parser.parse_args()
    env_cfg = dict(launcher=args.launcher, dist_cfg=dict(backend="nccl"))
    runner = Runner(build_model(), args.work_dir, build_dataloader, optim_cfg=dict(lr=0.05, momentum=0.9),
                    env_cfg=env_cfg, max_iters=4)
    runner.train()


if __name__ == "__main__":
    main()

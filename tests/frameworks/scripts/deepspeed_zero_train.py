"""A classifier trained with DeepSpeed ZeRO on 2 GPUs, written the way DeepSpeed's tutorials write it.

    deepspeed --num_gpus 2 deepspeed_zero_train.py OUT_DIR --deepspeed --deepspeed_config ds_config.json

The config decides everything else: the optimizer (``"type": "AdamW"``: DeepSpeed's FusedAdam, or
DeepSpeedCPUAdam with ``offload_optimizer``), the ZeRO stage, bf16 or fp16 with its loss scaler,
activation checkpointing. Under ZeRO-3 the model is built inside ``deepspeed.zero.Init`` (partitioned
as it is created) and its starting weights are set from rank 0 with ``GatheredParameters``, as one
loads pretrained weights. The trained model is saved with ``save_checkpoint``, disturbed by one more
step, restored with ``load_checkpoint``, and converted with zero_to_fp32. Each rank writes
OUT_DIR/result-<rank>.json; rank 0 also writes OUT_DIR/gathered.pt (the full trained parameters).
"""

import argparse
import inspect
import json
import os

import deepspeed
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from deepspeed.accelerator import get_accelerator
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
from torch.utils.data import TensorDataset

from tinydata import CLASSES, FEATURES, blobs, write_result

HIDDEN = 64


class Net(nn.Module):
    def __init__(self, checkpoint_activations):
        super().__init__()
        self.inp = nn.Linear(FEATURES, HIDDEN)
        self.hidden = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU())
        self.out = nn.Linear(HIDDEN, CLASSES)
        self.checkpoint_activations = checkpoint_activations
        self.hidden_forwards = 0
        self.hidden.register_forward_hook(self._count)

    def _count(self, module, args, output):
        self.hidden_forwards += 1

    def forward(self, x):
        h = F.relu(self.inp(x))
        if self.checkpoint_activations and self.training:
            h = deepspeed.checkpointing.checkpoint(self.hidden, h)  # recomputed in backward
        else:
            h = self.hidden(h)
        return self.out(h)


def gathered(model):
    """Every parameter in full, float32 on the host (ZeRO-3: gathered from the partitions)."""
    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        return {n: p.detach().float().cpu().clone() for n, p in model.named_parameters()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--local_rank", type=int, default=-1)
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()
    with open(args.deepspeed_config) as f:
        config = json.load(f)
    stage = config["zero_optimization"]["stage"]
    dtype = torch.bfloat16 if config.get("bf16", {}).get("enabled") else (
        torch.float16 if config.get("fp16", {}).get("enabled") else torch.float32)
    checkpoint_activations = "activation_checkpointing" in config

    deepspeed.init_distributed()
    if checkpoint_activations:
        deepspeed.checkpointing.configure(None, deepspeed_config=args.deepspeed_config)

    with deepspeed.zero.Init(config_dict_or_path=args.deepspeed_config, enabled=stage == 3):
        model = Net(checkpoint_activations)
    # Starting weights from rank 0 (as from a pretrained file), the same on every machine.
    start = torch.Generator().manual_seed(0)
    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=0):
        if dist.get_rank() == 0:
            for p in model.parameters():
                p.data.copy_(torch.randn(p.shape, generator=start) * 0.3)

    x, y = blobs()
    engine, _, loader, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters(),
                                                training_data=TensorDataset(x, y))
    steps, losses = 0, []

    def train_step(inputs, labels):
        inputs, labels = inputs.to(engine.device).to(dtype), labels.to(engine.device)
        loss = F.cross_entropy(engine(inputs).float(), labels)
        engine.backward(loss)
        engine.step()
        return loss.item()

    model.hidden_forwards = 0
    for epoch in range(3):
        for inputs, labels in loader:
            losses.append(train_step(inputs, labels))
            steps += 1
    hidden_forwards = model.hidden_forwards

    # ZeRO-3: what each rank holds between steps.
    partition_numel = sum(p.ds_tensor.numel() for p in model.parameters()) if stage == 3 else None
    resident_numel = sum(p.data.numel() for p in model.parameters())
    total_numel = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    partition_devices = sorted({str(p.ds_tensor.device) for p in model.parameters()}) if stage == 3 else None
    zero = engine.optimizer
    masters = getattr(zero, "fp32_partitioned_groups_flat", None) or getattr(zero, "single_partition_of_fp32_groups")

    engine.eval()
    with torch.no_grad():
        accuracy = (engine(x.to(engine.device).to(dtype)).argmax(1).cpu() == y).float().mean().item()
    engine.train()

    trained = gathered(model)
    ckpt = os.path.join(args.out_dir, "ckpt")
    engine.save_checkpoint(ckpt, tag="trained")
    inputs, labels = next(iter(loader))
    train_step(inputs, labels)  # moves the weights away from the checkpoint
    moved = any(not torch.equal(trained[n], v) for n, v in gathered(model).items())
    engine.load_checkpoint(ckpt, tag="trained")
    restored = gathered(model)
    loaded_equal = all(torch.equal(trained[n], restored[n]) for n in trained)

    optimizer = engine.optimizer.optimizer  # the torch optimizer inside ZeRO's wrapper
    fields = {}
    if dist.get_rank() == 0:
        torch.save(trained, os.path.join(args.out_dir, "gathered.pt"))
        fp32 = get_fp32_state_dict_from_zero_checkpoint(ckpt, tag="trained")
        fields["zero_to_fp32_keys_equal"] = sorted(fp32) == sorted(trained)
        fields["zero_to_fp32_max_diff"] = max((fp32[n].float() - trained[n]).abs().max().item() for n in trained)
        fields["zero_to_fp32_dtypes"] = sorted({str(t.dtype) for t in fp32.values()})
    dist.barrier()

    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        write_result(args.out_dir, model, accuracy=accuracy, zero_stage=engine.zero_optimization_stage(),
                     framework_device=get_accelerator().device_name(), device=str(engine.device),
                     local_rank=args.local_rank, env_local_rank=int(os.environ["LOCAL_RANK"]),
                     param_dtypes=sorted({str(p.dtype) for p in model.parameters()}),
                     optimizer=type(optimizer).__name__, optimizer_step=_step_function(optimizer),
                     master_devices=sorted({str(t.device) for t in masters}),
                     master_dtypes=sorted({str(t.dtype) for t in masters}),
                     loss_scale=float(zero.loss_scale) if dtype == torch.float16 else None,
                     partition_numel=partition_numel, resident_numel=resident_numel, total_numel=total_numel,
                     partition_devices=partition_devices, steps=steps, hidden_forwards=hidden_forwards,
                     first_loss=losses[0], last_loss=losses[-1], moved=moved, loaded_equal=loaded_equal,
                     finished=True, **fields)


def _step_function(optimizer):
    """Where the optimizer's update is computed: the op module's function it calls."""
    fn = getattr(optimizer, "multi_tensor_adam", None)
    if fn is None and getattr(optimizer, "ds_opt_adam", None) is not None:
        fn = optimizer.ds_opt_adam.adam_update
    if fn is None:
        return type(optimizer).__module__
    name = fn.__qualname__ if inspect.isfunction(fn) else fn.__name__  # a C++ op's qualname is pybind11's
    return f"{fn.__module__}.{name}"


if __name__ == "__main__":
    main()

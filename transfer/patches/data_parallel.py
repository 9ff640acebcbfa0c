"""nn.DataParallel and torch.nn.parallel.data_parallel on the target.

torch's data parallelism in one process splits, copies and joins through CUDA-only C++
(``torch._C._scatter``, ``_broadcast_coalesced``, ``_gather``) and runs its replicas in
threads on ``torch.accelerator``. Under transfer torch's own Python runs (the class, the
functional ``data_parallel`` of DCGAN-style ``if input.is_cuda and ngpu > 1`` code, the public
``scatter`` / ``gather`` / ``replicate`` / ``parallel_apply``) with those three steps done by
device copies, so the target computes what CUDA computes:

* scatter: the batch is split as torch splits it (``Tensor.chunk`` along ``dim``, or the given
  chunk sizes), chunk i moved to device i;
* replicate: replica i holds copies of the parameters on device i whose gradients sum into the
  module's, as CUDA's broadcast does; the first replica uses the module's own buffers and the others
  copies, so BatchNorm's batch statistics are per chunk and its running statistics come from the
  first chunk, as on CUDA;
* parallel_apply: the replicas run one after another in the calling thread, each under its own
  current device (CUDA runs one thread per device): CUDA's results, without the overlap;
* gather: the outputs are concatenated on ``output_device``.

On the cpu target every device is the one CPU, and the copies are clones. Device ordinals the
target lacks raise as CUDA's do. DistributedDataParallel is how to use several devices at speed.
"""

from __future__ import annotations

import importlib
import logging
import warnings
from itertools import chain

import torch
from torch._utils import ExceptionWrapper, _get_all_device_indices, _get_device_index
from torch.nn.parallel import DataParallel

logger = logging.getLogger("transfer")


def apply(ctx) -> None:
    translate = ctx.target.translator("DataParallel(device_ids)")
    package = importlib.import_module("torch.nn.parallel")
    module = importlib.import_module("torch.nn.parallel.data_parallel")  # the attribute is the function
    said = []

    def place(index):
        """The target device of CUDA device `index` (an int, a CUDA device or 'cpu' / -1)."""
        index = _get_device_index(index, True) if not isinstance(index, int) else index
        return torch.device("cpu") if index == -1 else translate(torch.device("cuda", index))

    def say_once(replicas: int) -> None:
        if not said:
            said.append(True)
            logger.warning("data parallelism over %d devices: the %d replicas run one after another from one "
                           "thread, each on its %s device (CUDA's results, not its overlap); "
                           "DistributedDataParallel runs them at once", replicas, replicas, ctx.profile.device_type)

    class Scatter:
        """torch.nn.parallel._functions.Scatter, by device copies (what scatter_gather.scatter calls)."""

        @staticmethod
        def apply(target_gpus, chunk_sizes, dim, input):
            chunks = input.split(list(chunk_sizes), dim) if chunk_sizes else input.chunk(len(target_gpus), dim)
            return tuple(chunk.to(place(device), non_blocking=True) for chunk, device in zip(chunks, target_gpus))

    class Gather:
        """torch.nn.parallel._functions.Gather, by device copies (what scatter_gather.gather calls)."""

        @staticmethod
        def apply(target_device, dim, *inputs):
            if all(t.dim() == 0 for t in inputs) and dim == 0:
                inputs = tuple(t.view(1) for t in inputs)
                warnings.warn("Was asked to gather along dimension 0, but all input tensors were scalars; "
                              "will instead unsqueeze and return a vector.", stacklevel=2)
            device = place(-1 if target_device == "cpu" else target_device)
            return torch.cat([t.to(device, non_blocking=True) for t in inputs], dim)

    def broadcast_coalesced_reshape(tensors, devices, detach=False):
        """replicate's copies of `tensors` for each device: [[copies on devices[0]], [on devices[1]], ...].

        As CUDA's broadcast: the first device's are the tensors themselves (detach) or views of them, the
        others copies; without detach the copies carry gradients back to the tensors."""
        if len(tensors) == 0:
            return []
        rows = []
        for j, index in enumerate(devices):
            device = place(index)
            row = []
            for t in tensors:
                if j == 0 and t.device == device:
                    row.append(t if detach else t.view_as(t))
                else:
                    source = t.detach() if detach else t
                    row.append(source.to(device, copy=True))
            rows.append(row)
        return rows

    def parallel_apply(modules, inputs, kwargs_tup=None, devices=None):
        """torch's parallel_apply, the replicas run in turn: each under its device, errors named as torch's."""
        if len(modules) != len(inputs):
            raise AssertionError(f"The number of modules {len(modules)} is not equal to the number of inputs "
                                 f"{len(inputs)}")
        kwargs_tup = kwargs_tup if kwargs_tup is not None else ({},) * len(modules)
        devices = devices if devices is not None else [None] * len(modules)
        if len(modules) > 1:
            say_once(len(modules))
        outputs = []
        for i, (replica, input, kwargs, device) in enumerate(zip(modules, inputs, kwargs_tup, devices)):
            index = None if device is None else _get_device_index(device, True)
            try:
                with torch.cuda.device(-1 if index is None else index):  # -1 selects nothing, as on CUDA
                    if not isinstance(input, (list, tuple)):
                        input = (input,)
                    outputs.append(replica(*input, **kwargs))
            except Exception:
                ExceptionWrapper(where=f"in replica {i} on device {index}").reraise()
        return outputs

    def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None):
        """torch.nn.parallel.data_parallel with the target's devices (torch's checks and steps)."""
        if not isinstance(inputs, tuple):
            inputs = (inputs,) if inputs is not None else ()
        if device_ids is None:
            device_ids = _get_all_device_indices()
        if output_device is None:
            output_device = device_ids[0]
        device_ids = [_get_device_index(x, True) for x in device_ids]
        output_device = _get_device_index(output_device, True)
        src_device_obj = place(device_ids[0])
        for t in chain(module.parameters(), module.buffers()):
            if t.device != src_device_obj:
                raise RuntimeError(f"module must have its parameters and buffers on device {src_device_obj} "
                                   f"(device_ids[0]) but found one of them on device: {t.device}")
        inputs, module_kwargs = scatter_gather.scatter_kwargs(inputs, module_kwargs, device_ids, dim)
        if not inputs and not module_kwargs:
            inputs, module_kwargs = ((),), ({},)
        if len(device_ids) == 1:
            return module(*inputs[0], **module_kwargs[0])
        used_device_ids = device_ids[:len(inputs)]
        replicas = replicate.replicate(module, used_device_ids)
        outputs = parallel_apply(replicas, inputs, module_kwargs, used_device_ids)
        return scatter_gather.gather(outputs, output_device, dim)

    def dp_init(wrapped, instance, args, kwargs):
        wrapped(*args, **kwargs)
        if instance.device_ids:  # torch checked each ordinal (_check_balance); the first is where the module is
            instance.src_device_obj = place(instance.device_ids[0])

    scatter_gather = importlib.import_module("torch.nn.parallel.scatter_gather")
    replicate = importlib.import_module("torch.nn.parallel.replicate")
    parallel_module = importlib.import_module("torch.nn.parallel.parallel_apply")
    data_parallel.__name__ = data_parallel.__qualname__ = "data_parallel"
    data_parallel.__doc__ = module.data_parallel.__doc__
    parallel_apply.__doc__ = parallel_module.parallel_apply.__doc__
    ctx.registry.wrap("data_parallel.init", DataParallel, "__init__", dp_init)
    ctx.registry.replace("data_parallel.scatter", scatter_gather, "Scatter", Scatter)
    ctx.registry.replace("data_parallel.gather", scatter_gather, "Gather", Gather)
    ctx.registry.replace("data_parallel.replicate", replicate, "_broadcast_coalesced_reshape",
                         broadcast_coalesced_reshape)
    # the name torch's DataParallel and data_parallel call, and the public ones
    for item, owner in (("parallel_apply", module), ("parallel_apply_public", package),
                        ("parallel_apply_module", parallel_module)):
        ctx.registry.replace(f"data_parallel.{item}", owner, "parallel_apply", parallel_apply)
    ctx.registry.replace("data_parallel.function", package, "data_parallel", data_parallel)
    ctx.registry.replace("data_parallel.function_in_module", module, "data_parallel", data_parallel)

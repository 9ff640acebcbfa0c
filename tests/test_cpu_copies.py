"""On the cpu target host-to-device moves copy, as CUDA copies host memory to the device.

``y = x.cuda(); y.add_(1)`` leaves ``x`` as it was on a real GPU (tests/oracle/cuda_recorded.json,
"host_to_device_moves_copy"); every spelling of a move to CUDA (Tensor.to/cuda, pin_memory,
torch.as_tensor, NumPy data, Module.to/cuda keeping the Parameter objects) copies on the cpu target.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn

HOST = [0.0, 1.0, 2.0, 3.0]


def host():
    return torch.arange(4, dtype=torch.float32)


MOVES = {
    "x.cuda()": lambda x: x.cuda(),
    "x.cuda(0)": lambda x: x.cuda(0),
    "x.cuda(non_blocking=True)": lambda x: x.cuda(non_blocking=True),
    "x.to('cuda')": lambda x: x.to("cuda"),
    "x.to('cuda:1')": lambda x: x.to("cuda:1"),
    "x.to('cuda', non_blocking=True)": lambda x: x.to("cuda", non_blocking=True),
    "x.to(device='cuda')": lambda x: x.to(device="cuda"),
    "x.to(torch.device('cuda', 0))": lambda x: x.to(torch.device("cuda", 0)),
    "x.to(0)": lambda x: x.to(0),
    "x.to('cuda', torch.float32)": lambda x: x.to("cuda", torch.float32),
    "x.to('cuda', copy=False)": lambda x: x.to("cuda", copy=False),
    "x.to('cuda', torch.float32, False, False)": lambda x: x.to("cuda", torch.float32, False, False),
    "x.pin_memory()": lambda x: x.pin_memory(),
    "torch.as_tensor(x, device='cuda')": lambda x: torch.as_tensor(x, device="cuda"),
    "torch.asarray(x, device='cuda')": lambda x: torch.asarray(x, device="cuda"),
}


@pytest.mark.parametrize("move", list(MOVES))
def test_host_to_device_moves_copy(cpu_target, move):
    """CUDA: a move from host memory to the device is a new tensor; changing it leaves x alone."""
    x = host()
    y = MOVES[move](x)
    y.add_(1)
    assert y is not x and x.tolist() == HOST and y.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_numpy_data_moved_to_cuda_is_a_copy(cpu_target):
    """torch.as_tensor / torch.asarray of a NumPy array with device='cuda': the array is host memory,
    the result device memory; without a device they share memory (torch's docs), as natively."""
    for make in (lambda a: torch.as_tensor(a, device="cuda"), lambda a: torch.asarray(a, device="cuda"),
                 lambda a: torch.as_tensor(a, dtype=torch.float64, device="cuda")):
        array = np.arange(3.0)
        make(array).add_(1)
        assert array.tolist() == [0.0, 1.0, 2.0]
    array = np.arange(3.0)
    torch.as_tensor(array).add_(1)
    assert array.tolist() == [1.0, 2.0, 3.0]  # no device: shared, as natively
    x = host()
    assert torch.as_tensor(x) is x and torch.as_tensor(x, device="cpu") is x
    x.requires_grad_()  # a move is differentiable on CUDA (a copy in the graph): gradients reach x
    (x.cuda() * 2 + x.to("cuda") * 3 + torch.as_tensor(x, device="cuda")).sum().backward()
    assert x.grad.tolist() == [6.0] * 4


@pytest.mark.parametrize("how", ["model.cuda()", "model.to('cuda')", "model.to(0)", "model.to(device='cuda:1')"])
def test_module_moves_copy_data_and_keep_parameters(cpu_target, how):
    """Module.cuda/Module.to: in place on the module, the Parameter objects stay (an optimizer built
    before the move keeps training them), their data is a copy: a tensor the script built the
    weights from (nn.Embedding.from_pretrained shares it) is not trained along."""
    pretrained = torch.arange(6.0).reshape(3, 2)
    model = nn.Embedding.from_pretrained(pretrained, freeze=False)
    weight = model.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    assert eval(how, {"model": model}) is model
    assert model.weight is weight and model.weight.is_cuda
    model(torch.tensor([0, 1], device="cuda")).sum().backward()
    optimizer.step()
    assert pretrained.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert model.weight.tolist() == [[-1.0, 0.0], [1.0, 2.0], [4.0, 5.0]]  # trained: the optimizer's parameter
    with pytest.raises(RuntimeError, match="cuda:5"):  # TRANSFER_CPU_DEVICES unset: 2 devices
        model.to("cuda:5")

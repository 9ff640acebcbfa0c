"""apex.mlp (apex's API) in torch: ``MLP(mlp_sizes, bias=True, activation="relu")``, every layer a linear
followed by the activation (apex's mlp_cuda applies it after each layer, the last included; "none",
"relu", "sigmoid"); parameters ``weight_i`` / ``bias_i`` initialised as apex does."""

import math
from copy import copy

import torch
import torch.nn.functional as F
from torch import nn

_ACTIVATIONS = {0: lambda x: x, 1: F.relu, 2: torch.sigmoid}


def _mlp(bias, activation, input, *params):
    n = len(params) // 2 if bias else len(params)
    weights, biases = params[:n], (params[n:] if bias else [None] * n)
    out = input
    for weight, b in zip(weights, biases):
        out = _ACTIVATIONS[activation](F.linear(out, weight, b))
    return out


class MlpFunction(torch.autograd.Function):
    """apex's autograd Function name; the forward and backward are torch's (autograd through `_mlp`)."""

    @staticmethod
    def forward(ctx, bias, activation, *args):
        with torch.enable_grad():
            detached = [a.detach().requires_grad_(a.requires_grad) for a in args]
            out = _mlp(bias, activation, *detached)
        ctx.save_for_backward(*args)
        ctx.detached, ctx.out = detached, out
        return out.detach()

    @staticmethod
    def backward(ctx, grad_o):
        inputs = [d for d in ctx.detached if d.requires_grad]
        grads = iter(torch.autograd.grad(ctx.out, inputs, grad_o, allow_unused=True))
        return (None, None, *[next(grads) if d.requires_grad else None for d in ctx.detached])


def mlp_function(bias, activation, *args):
    return _mlp(bias, activation, *args)


class MLP(torch.nn.Module):
    def __init__(self, mlp_sizes, bias=True, activation="relu"):
        super().__init__()
        self.num_layers = len(mlp_sizes) - 1
        self.mlp_sizes = copy(mlp_sizes)
        self.bias = 1 if bias else 0
        if activation == "none":
            self.activation = 0
        elif activation == "relu":
            self.activation = 1
        elif activation == "sigmoid":
            self.activation = 2
        else:
            raise TypeError("activation must be relu or none.")
        self.weights = []
        self.biases = []
        for i in range(self.num_layers):
            w = torch.nn.Parameter(torch.empty(mlp_sizes[i + 1], mlp_sizes[i]))
            self.weights.append(w)
            setattr(self, "weight_{}".format(i), w)
            if self.bias:
                b = torch.nn.Parameter(torch.empty(mlp_sizes[i + 1]))
                self.biases.append(b)
                setattr(self, "bias_{}".format(i), b)
        self.reset_parameters()

    def reset_parameters(self):
        for weight in self.weights:
            dimsum = weight.size(0) + weight.size(1)
            nn.init.normal_(weight, 0.0, math.sqrt(2.0 / float(dimsum)))
        if self.bias:
            for bias in self.biases:
                nn.init.normal_(bias, 0.0, math.sqrt(1.0 / float(bias.size(0))))

    def forward(self, input):
        weights = [getattr(self, "weight_{}".format(i)) for i in range(self.num_layers)]
        biases = [getattr(self, "bias_{}".format(i)) for i in range(self.num_layers)] if self.bias else []
        return mlp_function(self.bias, self.activation, input, *weights, *biases)

    def extra_repr(self):
        return f"MLP sizes: {self.mlp_sizes}, Bias={self.bias}, activation={self.activation}"

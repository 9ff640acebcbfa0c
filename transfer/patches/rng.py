"""The cpu target's random streams: device draws stay off the CPU stream, as on CUDA.

On CUDA a script has two kinds of random stream: the CPU generator
(``torch.default_generator``: ``torch.randperm(n)``, RandomSampler's seed,
``random_split``, the DataLoader's base seed) and one generator per CUDA device
(dropout and every other draw on CUDA tensors). The cpu target gives each
virtual device its own generator (`transfer.cpu.runtime.generator`); this area
routes the draws a CUDA script makes on the device to it, so the CPU stream,
and with it the data order, is the one the CUDA run has:

* random factories with a CUDA device (``torch.randn(3, device='cuda')``)
  get the device generator (the factories area, `random_factory`);
* the dropout family (``F.dropout``, ``nn.Dropout``, ``dropout2d``,
  ``alpha_dropout``, ...) and ``F.scaled_dot_product_attention`` with
  ``dropout_p > 0``: model code, which a CUDA script runs on the device. Their
  C kernels take no generator, so each call runs with the current virtual
  device's state swapped into the CPU generator (~3 us a call; a dropout on a
  64x64 tensor costs ~50 us). Inside ``torch.compile`` they are left native;
* activation checkpointing restores the device states with the CPU state, as
  it restores CUDA states on CUDA (else the recomputed dropout masks would
  differ from the forward's): ``torch.get_rng_state()`` called from
  ``torch/utils/checkpoint.py`` (directly or through ``fork_rng``) carries the
  virtual devices' states, and ``torch.set_rng_state`` of such a state restores
  them. States a script takes itself carry nothing.

What cannot be routed: a random op on an existing tensor (``x.uniform_()``,
``normal_``, ``bernoulli_``, ``torch.rand_like(x)``, ``torch.multinomial``,
factories given ``device=x.device``) cannot tell a tensor standing for a CUDA
tensor from a host tensor, both being CPU tensors; it draws from the CPU
stream. The first such call from the script's own code (not torch's) after a
CUDA device was used logs one warning naming the call site.
"""

from __future__ import annotations

import logging
import os
import sys

import torch

from .. import frames
from ..cpu import runtime as cpu_runtime
from ..devices import is_compiling
from ..fastcalls import finish

logger = logging.getLogger("transfer")

_DROPOUTS = ("dropout", "dropout_", "feature_dropout", "feature_dropout_", "alpha_dropout", "alpha_dropout_",
             "feature_alpha_dropout", "feature_alpha_dropout_")
_MISS = object()
_CHECKPOINT_FILE = os.path.join(frames.TORCH_DIR, "utils", "checkpoint.py")

#: Random ops on existing tensors: (owner, name). They stay on the CPU stream (module docstring).
_TENSOR_DRAWS = ("uniform_", "normal_", "bernoulli_", "bernoulli", "random_", "exponential_", "geometric_",
                 "log_normal_", "cauchy_", "multinomial")
_TORCH_DRAWS = ("bernoulli", "multinomial", "poisson")
#: Factories that draw: with a CUDA device they get the device's generator (`random_factory`).
RANDOM_FACTORIES = frozenset({"rand", "randn", "randint", "randperm", "normal", "rand_like", "randn_like",
                              "randint_like"})
_LIKE = ("rand_like", "randn_like", "randint_like")


def apply(ctx) -> None:
    if ctx.cpu is None:
        return  # a vendor's device has generators of its own, used by its own kernels
    reg = ctx.registry
    for name in _DROPOUTS:
        native = getattr(torch._VF, name, None)
        if native is None:
            continue
        routed = _routed_dropout(native, name)
        reg.replace(f"rng.{name}", torch._VF, name, routed)  # what torch.nn.functional calls
        if getattr(torch, name, None) is native:
            reg.replace(f"rng.torch.{name}", torch, name, _routed_dropout(native, name))
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if sdpa is not None:
        reg.replace("rng.scaled_dot_product_attention", torch.nn.functional, "scaled_dot_product_attention",
                    _routed_sdpa(sdpa))
    reg.replace("rng.get_rng_state", torch, "get_rng_state", _get_rng_state(torch.get_rng_state))
    reg.replace("rng.set_rng_state", torch, "set_rng_state", _set_rng_state(torch.set_rng_state))
    notice = _Notice(ctx)
    for name in _TENSOR_DRAWS:
        reg.replace(f"rng.Tensor.{name}", torch.Tensor, name, notice.wrap(getattr(torch.Tensor, name), f"Tensor.{name}"))
    for name in _TORCH_DRAWS:
        reg.replace(f"rng.{name}", torch, name, notice.wrap(getattr(torch, name), f"torch.{name}"))
    ctx.rng_notice = notice  # the factories area (applied next) adds the *_like factories


def factory_draws(ctx, name: str, original):
    """For the factories area: ``(draws, undirected)`` for factory `name` on the cpu target, or None.

    `draws` is ``(memo_get, generator_of, current)`` (`cpu_runtime.generator_lookup`): the generator of
    the virtual device a CUDA `device` argument names (None for another device), `current` read for an
    argument that names no ordinal; `undirected()` runs before a call without one that draws on
    an existing tensor (``*_like``, ``normal(tensor, ...)``): the notice.
    """
    if ctx.cpu is None or name not in RANDOM_FACTORIES:
        return None
    draws = cpu_runtime.generator_lookup() + (cpu_runtime.current_generator,)

    if name in _LIKE and not _like_takes_generator(original):
        draws = None  # torch < 2.x: *_like take no generator; they stay on the CPU stream
    notice = getattr(ctx, "rng_notice", None)
    undirected = notice.checker(f"torch.{name}") if notice is not None and (name in _LIKE or name == "normal") \
        else None
    return draws, undirected


def _like_takes_generator(like) -> bool:
    """Feature probe: the *_like factories take `generator=` in newer torch."""
    try:
        like(torch.empty(1), generator=torch.Generator()) if like is not torch.randint_like \
            else like(torch.empty(1), 2, generator=torch.Generator())
    except TypeError:
        return False
    return True


def on_device_stream(fn, *args, **kwargs):
    """Call `fn` with the current virtual device's generator state as the CPU generator's.

    Both states are put back afterwards: the device generator advanced by the
    draws `fn` made, the CPU generator as it was.
    """
    default, device = torch.default_generator, cpu_runtime.generator()
    host = default.get_state()
    default.set_state(device.get_state())
    try:
        return fn(*args, **kwargs)
    finally:
        device.set_state(default.get_state())
        default.set_state(host)


def _routed_dropout(native, name):
    def dropout(input, p, train):
        if not train or not p or is_compiling():
            return native(input, p, train)  # no draw (or a traced graph: native)
        return on_device_stream(native, input, p, train)

    dropout.__qualname__ = name
    return finish(dropout, native, name)


def _routed_sdpa(native):
    def scaled_dot_product_attention(*args, **kwargs):
        p = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
        if p and not is_compiling():
            return on_device_stream(native, *args, **kwargs)
        return native(*args, **kwargs)

    return finish(scaled_dot_product_attention, native, "scaled_dot_product_attention")


def _from_checkpoint(frame) -> bool:
    """True when torch/utils/checkpoint.py is among the 4 nearest callers (direct, or via fork_rng)."""
    for _ in range(4):
        if frame is None:
            return False
        if frame.f_code.co_filename == _CHECKPOINT_FILE:
            return True
        frame = frame.f_back
    return False


def _get_rng_state(native):
    def get_rng_state():
        state = native()
        if _from_checkpoint(sys._getframe(1)):
            state._transfer_device_states = cpu_runtime.get_rng_state_all()
        return state

    return finish(get_rng_state, native, "get_rng_state")


def _set_rng_state(native):
    def set_rng_state(new_state):
        native(new_state)
        states = getattr(new_state, "_transfer_device_states", None)
        if states is not None:
            cpu_runtime.set_rng_state_all(states)

    return finish(set_rng_state, native, "set_rng_state")


class _Notice:
    """One warning, the first time the script's own code draws on an existing tensor
    after a CUDA device was used (module docstring)."""

    def __init__(self, ctx):
        self.target = ctx.target
        self.said = False

    def wrap(self, native, api):
        check = self.checker(api)

        def draw(*args, **kwargs):
            check()
            return native(*args, **kwargs)

        return finish(draw, native, api.rsplit(".", 1)[-1])

    def checker(self, api):
        """A callable to run just before the draw `api`, in the patched function's frame."""
        notice = self

        def check():
            if not notice.said and notice.target.translations and not is_compiling():
                notice.say(api)

        return check

    def say(self, api) -> None:
        if frames.called_by_torch(sys._getframe(3)):  # say <- check <- the patched function <- its caller
            return  # torch's own host-side draws (samplers, init) are where CUDA makes them too
        self.said = True
        logger.warning(
            "transfer: %s at %s draws from the CPU generator: on the cpu target a tensor standing for a CUDA "
            "tensor is a CPU tensor, so random ops on existing tensors cannot use the device's generator as "
            "CUDA does. From here on the CPU stream (torch.randperm, RandomSampler and DataLoader order) can "
            "differ from a CUDA run's; dropout and random factories with device='cuda' do use per-device "
            "generators. See docs/limits.md.", api, frames.caller_site(3))

"""apex.amp.frontend: initialize(), the O0-O3 opt levels, state_dict()/load_state_dict() (apex's)."""

from collections import OrderedDict

import torch

from ._amp_state import _amp_state, maybe_print, warn_or_err
from ._initialize import _initialize


class Properties(object):
    """The default properties of an opt level; overrides are checked for consistency as apex does."""

    def __init__(self):
        self.options = {"enabled": False, "opt_level": None, "cast_model_type": None, "patch_torch_functions": False,
                        "keep_batchnorm_fp32": None, "master_weights": None, "loss_scale": 1.0}

    def _update_options_dict(self, new_options):
        for k, v in new_options:
            if k in self.options:
                self.options[k] = v
            else:
                raise ValueError("Tried to set unexpected option {}".format(k))

    def __getattr__(self, name):
        if "options" in self.__dict__:
            options = self.__dict__["options"]
            if name in options:
                return options[name]
        raise AttributeError("'{}' object has no attribute '{}'".format(type(self).__name__, name))

    def __setattr__(self, name, value):
        if "options" not in self.__dict__:
            super(Properties, self).__setattr__(name, value)
            return
        if name not in self.options:
            super(Properties, self).__setattr__(name, value)
            return
        if name == "cast_model_type":
            if self.opt_level == "O1" and value is not None and value is not False and value is not torch.float32:
                warn_or_err("O1 inserts casts around Torch functions rather than model weights, so with O1, the "
                            "model weights themselves should remain FP32. If you wish to cast the model to a "
                            "different type, use opt_level='O2' or 'O3'. cast_model_type was {}".format(value))
            self.options[name] = value
        elif name == "patch_torch_functions":
            if self.opt_level != "O1" and value:
                warn_or_err("Currently, patch_torch_functions=True should only be set by selecting opt_level='O1'.")
            self.options[name] = value
        elif name == "keep_batchnorm_fp32":
            if self.opt_level == "O1" and value is not None:
                warn_or_err("With opt_level O1, batchnorm functions are automatically patched to run in FP32, so "
                            "keep_batchnorm_fp32 should be None. keep_batchnorm_fp32 was {}".format(value))
            if value == "False":
                self.options[name] = False
            elif value == "True":
                self.options[name] = True
            else:
                assert value is True or value is False or value is None, \
                    "keep_batchnorm_fp32 must be a boolean, the string 'True' or 'False', or None, found " \
                    "keep_batchnorm_fp32={}".format(value)
                self.options[name] = value
        elif name == "master_weights":
            if self.opt_level == "O1" and value is not None:
                warn_or_err("It doesn't make sense to use master_weights with O1. With O1, your model weights "
                            "themselves should be FP32.")
            self.options[name] = value
        elif name == "loss_scale":
            self.options[name] = value if value == "dynamic" else float(value)
        else:
            self.options[name] = value


class _OptLevel:
    """An opt level sets these properties, in this order, after enabled and opt_level (apex's O0-O3)."""

    def __call__(self, properties):
        properties.enabled = True
        properties.opt_level = type(self).__name__
        for name in ("cast_model_type", "patch_torch_functions", "keep_batchnorm_fp32", "master_weights",
                     "loss_scale"):
            setattr(properties, name, getattr(self, name))
        return properties


class O3(_OptLevel):
    brief = "O3:  Pure FP16 training."
    cast_model_type, patch_torch_functions, keep_batchnorm_fp32 = torch.float16, False, False
    master_weights, loss_scale = False, 1.0


class O2(_OptLevel):
    brief = "O2:  FP16 training with FP32 batchnorm and FP32 master weights.\n"
    cast_model_type, patch_torch_functions, keep_batchnorm_fp32 = torch.float16, False, True
    master_weights, loss_scale = True, "dynamic"


class O1(_OptLevel):
    brief = "O1:  Insert automatic casts around Pytorch functions and Tensor methods.\n"
    cast_model_type, patch_torch_functions, keep_batchnorm_fp32 = None, True, None
    master_weights, loss_scale = None, "dynamic"


class O0(_OptLevel):
    brief = "O0:  Pure FP32 training.\n"
    cast_model_type, patch_torch_functions, keep_batchnorm_fp32 = torch.float32, False, None
    master_weights, loss_scale = False, 1.0


opt_levels = {"O3": O3(), "O2": O2(), "O1": O1(), "O0": O0()}


def initialize(models, optimizers=None, enabled=True, opt_level="O1", cast_model_type=None,
               patch_torch_functions=None, keep_batchnorm_fp32=None, master_weights=None, loss_scale=None,
               cast_model_outputs=None, num_losses=1, verbosity=1, min_loss_scale=None, max_loss_scale=2. ** 24):
    """apex.amp.initialize: returns the models and optimizers, in the structure they were passed
    (``model, optimizer``; lists stay lists), prepared for ``opt_level`` and the overrides given."""
    _amp_state.opt_properties = Properties()
    _amp_state.verbosity = verbosity
    if not enabled:
        return models if optimizers is None else (models, optimizers)
    if not torch.backends.cudnn.enabled:
        raise RuntimeError("Amp requires torch.backends.cudnn.enabled = True")
    if opt_level not in opt_levels:
        raise RuntimeError("Unexpected optimization level {}. ".format(opt_level) +
                           "Options are 'O0', 'O1', 'O2', 'O3'.  Note that in `O0`, `O1`, etc., the prefix O is "
                           "the letter O, not the number zero.")
    _amp_state.opt_properties = opt_levels[opt_level](_amp_state.opt_properties)
    maybe_print("Selected optimization level {}".format(opt_levels[opt_level].brief), True)
    maybe_print("Defaults for this optimization level are:", True)
    for k, v in _amp_state.opt_properties.options.items():
        maybe_print("{:22} : {}".format(k, v), True)
    _amp_state.min_loss_scale = min_loss_scale
    _amp_state.max_loss_scale = max_loss_scale
    maybe_print("Processing user overrides (additional kwargs that are not None)...", True)
    properties = _amp_state.opt_properties
    if enabled is not None:
        properties.enabled = enabled
    if opt_level is not None:
        properties.opt_level = opt_level
    if cast_model_type is not None:
        properties.cast_model_type = cast_model_type
    if patch_torch_functions is not None:
        properties.patch_torch_functions = patch_torch_functions
    if keep_batchnorm_fp32 is not None:
        properties.keep_batchnorm_fp32 = keep_batchnorm_fp32
    if master_weights is not None:
        properties.master_weights = master_weights
    if loss_scale is not None:
        properties.loss_scale = loss_scale
    maybe_print("After processing overrides, optimization options are:", True)
    for k, v in properties.options.items():
        maybe_print("{:22} : {}".format(k, v), True)
    return _initialize(models, optimizers, properties, num_losses, cast_model_outputs)


def state_dict(destination=None):
    if destination is None:
        destination = OrderedDict()
    for idx, loss_scaler in enumerate(_amp_state.loss_scalers):
        destination["loss_scaler%d" % idx] = {"loss_scale": loss_scaler.loss_scale(),
                                              "unskipped": loss_scaler._unskipped}
    return destination


def load_state_dict(state_dict):
    if len(state_dict) != len(_amp_state.loss_scalers):
        print("Warning: state_dict contains {} entries, while {} loss_scalers are used".format(
            len(state_dict), len(_amp_state.loss_scalers)))
    state_dict = state_dict.copy()
    nb_loss_scalers = len(_amp_state.loss_scalers)
    unexpected_keys = []
    idx = 0
    for key in state_dict:
        if "loss_scaler" not in key:
            unexpected_keys.append(key)
        else:
            if idx > (nb_loss_scalers - 1):
                print("Skipping loss_scaler[{}], since num_losses was set to {}".format(idx, nb_loss_scalers))
                break
            _amp_state.loss_scalers[idx]._loss_scale = state_dict[key]["loss_scale"]
            _amp_state.loss_scalers[idx]._unskipped = state_dict[key]["unskipped"]
            idx += 1
    if len(unexpected_keys) > 0:
        raise RuntimeError("Error(s) in loading state_dict. Unexpected key(s) in state_dict: {}. ".format(
            ", ".join('"{}"'.format(k) for k in unexpected_keys)))

"""Drop-ins: transfer's own implementations of third-party CUDA-only packages, under their public names.

Real training code imports ``flash_attn``, ``xformers``, ``apex``, ...: packages
whose kernels are CUDA C++ and which are absent, or present but unable to run,
on the active target. While transfer is active, `apply` installs one
``sys.meta_path`` finder (through ``ctx.registry``: recorded, undone by
``transfer.uninstall()``) that serves each package of `PACKAGES`:

* a *provided* package (``home`` set) is loaded from
  ``transfer/dropins/<name>/`` (or the module ``transfer/dropins/<name>.py``
  where the real one is a plain module: amp_C) UNDER ITS PUBLIC NAME: ``import flash_attn``
  gives a real package (``__name__``/``__spec__.name`` ``flash_attn``,
  ``__path__``, ``__file__``, ``__version__``), submodules resolve in that
  folder (``from flash_attn.ops.rms_norm import RMSNorm``), and
  ``importlib.util.find_spec`` finds it. ``importlib.metadata`` answers for its
  distribution too (``version('flash-attn')``, ``packages_distributions()``),
  as libraries' availability checks ask (transformers'
  ``is_flash_attn_2_available``). A module the real package has and we do not
  provide raises ``ModuleNotFoundError`` naming what is provided.
* a *refused* package (``home`` None: transformer_engine) is one we will not
  fake: ``import`` raises `ModuleNotFoundError` (an ImportError, so
  ``try/except ImportError`` fallbacks run) with ``refusal`` as the message,
  while ``importlib.util.find_spec`` answers None (availability checks: False).

Only where the real package is not usable: ``real_usable(ctx)`` is asked once,
at the first import of the name (never at install), and when it is True the
finder steps aside for that package. Nothing of a package is imported until a
program imports it, so processes that never do pay one dict lookup per import
of another module that is not yet loaded. A package already in ``sys.modules``
when transfer installs (imported before it) is left as it is, except one that
torch itself imports during ``import torch`` (``imported_by_torch``: torch/cuda
probes for ``pynvml``, which nvidia-ml-py provides in NVIDIA's containers and
beside nvitop or gpustat): where it is to be served, ours takes the real one's
place in ``sys.modules`` and in the torch modules holding it, at install, and
the undo puts the real one back. A script that imported the real one itself
before transfer installed keeps the module it holds.

Switches: ``TRANSFER_DISABLE=thirdparty`` (all) or ``thirdparty.<name>``
(one); the registry lists each served package as ``thirdparty.<name>``.
Uninstalling removes the finder and every module it created from sys.modules.

Under ``TRANSFER_DEVICE=...`` a script may import one of these names before
torch (so before transfer installs): `ImportTrigger`, armed at start-up by
``transfer._autoload.arm``, imports torch at that moment (which installs
transfer) and hands the import to the finder, or to the module install took
over (`_AlreadyServed`).

Adding a package: a `Package` row here, its public module tree in
``transfer/dropins/<name>/``, its rows in ``transfer/support.py``.
"""

from __future__ import annotations

import os
import sys
from types import MappingProxyType
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))


class Package(NamedTuple):
    """One third-party package transfer serves under its public name."""

    name: str  # the top-level import name ("flash_attn")
    distribution: str  # the distribution importlib.metadata reports ("flash-attn")
    version: str  # __version__ and the metadata Version
    real_usable: Callable[[Any], bool]  # (ctx) -> the real package can run on this target: step aside
    home: Optional[str] = None  # folder of our public module tree (under HERE); None: refused
    refusal: str = ""  # the ImportError message of a refused package
    summary: str = ""  # the metadata Summary
    imported_by_torch: Tuple[str, ...] = ()  # torch modules that import the real one during `import torch`


def real_spec(name: str):
    """The real package's spec on sys.path, found without importing it (None if absent)."""
    from importlib.machinery import PathFinder

    try:
        return PathFinder.find_spec(name)
    except (ImportError, ValueError):
        return None


def cuda_kernels_only(ctx) -> bool:
    """`real_usable` of packages whose work is done by CUDA C++ extensions.

    Those kernels run on real CUDA devices only, and transfer is active only
    where none runs (``auto`` stands aside on CUDA): an installed copy cannot
    run here, whatever the target (npu, sdaa, gcu, cpu), so ours is served.
    """
    return ctx.profile.device_type == "cuda"


FLASH_ATTN_VERSION = "2.7.4.post1"  # bert_padding.unpad_input returns 5 values since 2.7.0
APEX_VERSION = "0.1"  # apex's setup.py version (the package itself has no __version__)

PACKAGES: Mapping[str, Package] = MappingProxyType({
    p.name: p for p in (
        Package("flash_attn", "flash-attn", FLASH_ATTN_VERSION, cuda_kernels_only, home="flash_attn",
                summary="flash_attn 2.x API on torch's scaled_dot_product_attention "
                        "(torch_npu.npu_fusion_attention on npu), provided by transfer"),
        Package("xformers", "xformers", "0.0.29.post3", cuda_kernels_only, home="xformers",
                summary="xformers.ops.memory_efficient_attention on torch's scaled_dot_product_attention, "
                        "provided by transfer"),
        Package("apex", "apex", APEX_VERSION, cuda_kernels_only, home="apex",
                summary="NVIDIA apex's amp, optimizers (FusedAdam, FusedLAMB, FusedSGD), normalization, parallel "
                        "and multi_tensor_apply on torch (the target's fused optimizers), provided by transfer"),
        # apex's wheel also installs the extension module amp_C (a module, not a package: transfer/dropins/amp_C.py)
        Package("amp_C", "apex", APEX_VERSION, cuda_kernels_only, home="amp_C",
                summary="apex's multi-tensor kernels (amp_C) on torch foreach ops, provided by transfer"),
        Package("pynvml", "nvidia-ml-py", "13.615.71", cuda_kernels_only, home="pynvml",
                summary="NVML's queries (pynvml) answered for the target's devices, provided by transfer",
                imported_by_torch=("torch.cuda",)),  # torch/cuda/__init__.py: `import pynvml` where installed
        # flash-attention's compiled extensions (csrc/), imported by name by its older layers and by trainers
        Package("rotary_emb", "rotary_emb", "0.1", cuda_kernels_only, home="rotary_emb",
                summary="flash-attention's rotary kernel (apply_rotary) in torch, provided by transfer"),
        Package("xentropy_cuda_lib", "xentropy_cuda_lib", "", cuda_kernels_only,
                refusal="xentropy_cuda_lib (flash-attention's compiled cross-entropy kernel) is not provided by "
                        "transfer: its forward/backward entry points exist only as CUDA code. Use "
                        "flash_attn.losses.cross_entropy.CrossEntropyLoss or torch.nn.CrossEntropyLoss, which "
                        "compute the same loss on this target."),
        Package("dropout_layer_norm", "dropout_layer_norm", "", cuda_kernels_only,
                refusal="dropout_layer_norm (flash-attention's compiled fused dropout + residual + LayerNorm "
                        "kernel) is not provided by transfer: its entry points exist only as CUDA code. Use "
                        "flash_attn.ops.layer_norm / flash_attn.ops.rms_norm (dropout_add_layer_norm, "
                        "DropoutAddLayerNorm, RMSNorm), which transfer provides."),
        Package("transformer_engine", "transformer-engine", "", cuda_kernels_only,
                refusal="transformer_engine is not provided by transfer: its FP8 kernels and fused modules "
                        "(te.Linear, te.LayerNorm, te.fp8_autocast, ...) exist only for NVIDIA GPUs, and a "
                        "stand-in would silently change numerics. Use torch.nn.Linear / torch.nn.LayerNorm / "
                        "torch.autocast (bf16) instead, or the vendor's own library (on Ascend: MindSpeed's "
                        "transformer layers); code that does `try: import transformer_engine except "
                        "ImportError:` takes its fallback."),
    )
})


class _Finder:
    """The sys.meta_path finder serving `packages` (enabled `Package` rows)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.packages: Dict[str, Package] = {}
        self._serve: Dict[str, bool] = {}  # name -> serve it (real_usable asked once)

    def serves(self, name: str) -> Optional[Package]:
        package = self.packages.get(name)
        if package is None:
            return None
        serve = self._serve.get(name)
        if serve is None:
            serve = self._serve[name] = not package.real_usable(self.ctx)
        return package if serve else None

    def find_spec(self, fullname, path=None, target=None):
        package = self.packages.get(fullname.partition(".")[0])  # the whole cost for other modules
        if package is None or self.serves(package.name) is None:
            return None
        if package.home is None:
            if _called_by_import():
                raise ModuleNotFoundError(package.refusal, name=fullname)
            return None
        spec = _spec(package, fullname)
        if spec is None and _called_by_import():
            raise ModuleNotFoundError(_missing_message(package, fullname), name=fullname)
        return spec

    def find_distributions(self, context=None):
        """importlib.metadata's hook: the distributions of the packages served."""
        from ._metadata import distributions

        return distributions(self, context)

    def invalidate_caches(self):
        pass

    def created(self, name: str) -> List[str]:
        """Modules of package `name` in sys.modules that this finder loaded."""
        home = os.path.join(HERE, name)
        return [key for key, module in list(sys.modules.items())
                if key.partition(".")[0] == name
                and ((getattr(module, "__file__", None) or "").startswith(home + os.sep)
                     or getattr(module, "__file__", None) == home + ".py")]  # a module, not a package (amp_C)


def _spec(package: Package, fullname: str):
    from importlib.util import spec_from_file_location

    base = os.path.join(HERE, package.home, *fullname.split(".")[1:])
    init = os.path.join(base, "__init__.py")
    if os.path.isfile(init):
        return spec_from_file_location(fullname, init, submodule_search_locations=[base])
    if os.path.isfile(base + ".py"):
        return spec_from_file_location(fullname, base + ".py")
    return None


def _called_by_import() -> bool:
    """True when the import system (an import statement, import_module) asks, not find_spec.

    A missing module must fail an import with our message, while
    ``importlib.util.find_spec`` must just answer None (availability checks).
    Both reach finders through importlib._bootstrap._find_spec; who called
    that tells them apart.
    """
    frame = sys._getframe(1)
    for _ in range(8):
        frame = frame.f_back
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name == "_find_and_load_unlocked":
            return True
        if code.co_name == "find_spec" and code.co_filename.endswith(os.path.join("importlib", "util.py")):
            return False
    return False


#: What the target offers instead of a module a drop-in does not provide (said in the import error).
INSTEAD = {
    "flash_attn.modules": "of flash-attention's model code only flash_attn.modules.mha (MHA) is provided; for "
                          "Block, Mlp, embeddings use torch.nn layers (torch.nn.MultiheadAttention, nn.Sequential)",
    "flash_attn.models": "flash_attn.models (GPT, Llama, BERT builders) is not provided: use the transformers "
                         "models with attn_implementation='flash_attention_2' (served by flash_attn_func)",
    "apex.transformer": "apex.transformer (Megatron's tensor parallelism) is not provided: use "
                        "torch.distributed.tensor.parallel",
}


def _missing_message(package: Package, fullname: str) -> str:
    provided = sorted(_modules_of(package))
    instead = next((f" {text}." for prefix, text in INSTEAD.items()
                    if fullname == prefix or fullname.startswith(prefix + ".")), "")
    return (f"No module named {fullname!r}: transfer provides {package.name} {package.version} "
            f"(its CUDA kernels cannot run on this target) with the modules {', '.join(provided)}; "
            f"{fullname} is not among them.{instead} See docs/thirdparty.md.")


def _modules_of(package: Package) -> List[str]:
    root = os.path.join(HERE, package.home)
    names = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        rel = os.path.relpath(folder, root)
        prefix = package.name if rel == "." else ".".join([package.name] + rel.split(os.sep))
        for file in files:
            if file == "__init__.py":
                names.append(prefix)
            elif file.endswith(".py") and not file.startswith("_"):
                names.append(f"{prefix}.{file[:-3]}")
    return names


_finder: Optional[_Finder] = None  # the installed finder (ImportTrigger hands imports to it)


def apply(ctx) -> None:
    """Serve every enabled package of `PACKAGES` (registry names ``thirdparty.<name>``)."""
    global _finder
    finder = _Finder(ctx)
    for name, package in PACKAGES.items():
        key = f"thirdparty.{name}"
        if not ctx.registry.enabled(key):
            continue
        if name in sys.modules:  # imported before transfer installed: left alone, unless torch imported it
            if not package.imported_by_torch:
                continue
            finder.packages[name] = package
            if finder.serves(name) is None:
                del finder.packages[name]
                continue
            ctx.registry.on_revert(key, _take_over(ctx, key, package))
        finder.packages[name] = package
        ctx.registry.on_revert(key, _remover(finder, name))
    if finder.packages:
        sys.meta_path.insert(0, finder)
        _finder = finder


def _take_over(ctx, key: str, package: Package) -> Callable[[], None]:
    """Serve `package` in place of the real one, which torch imported during `import torch`, before transfer
    installed: ours takes its place in sys.modules and in each module of ``package.imported_by_torch`` that
    holds it (``torch.cuda.pynvml``, through the registry). Returns the undo that puts the real one back in
    sys.modules (run after `_remover` has taken ours out)."""
    from importlib.util import module_from_spec

    name = package.name
    real = sys.modules.pop(name)
    spec = _spec(package, name)
    ours = module_from_spec(spec)
    sys.modules[name] = ours
    try:
        spec.loader.exec_module(ours)
    except BaseException:
        sys.modules[name] = real
        raise
    for holder in package.imported_by_torch:
        module = sys.modules.get(holder)
        if module is not None and getattr(module, name, None) is real:
            ctx.registry.replace(key, module, name, ours)

    def undo() -> None:
        if name not in sys.modules:
            sys.modules[name] = real

    return undo


def _remover(finder: _Finder, name: str) -> Callable[[], None]:
    def undo() -> None:
        global _finder
        for module in finder.created(name):
            sys.modules.pop(module, None)
        finder.packages.pop(name, None)
        if not finder.packages:
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
            if _finder is finder:
                _finder = None

    return undo


class ImportTrigger:
    """A start-up finder for TRANSFER_DEVICE runs: an import of a served name
    before ``import torch`` imports torch first (installing transfer) and asks
    the finder then installed. Costs one dict lookup for other imports."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in PACKAGES or "torch" in sys.modules:
            return None  # once torch is imported, the finder (ahead of this one) has answered
        import torch  # noqa: F401  (transfer installs at the end of this import)

        if _finder is None:
            return None
        served = sys.modules.get(fullname)
        if served is not None and fullname in _finder.created(fullname.partition(".")[0]):
            # torch imported the name itself (pynvml) and install took it over: this import gets that module
            del sys.modules[fullname]  # else importlib would load a second copy from the module's own spec
            return _AlreadyServed.spec(served)
        return _finder.find_spec(fullname, path, target)

    def find_distributions(self, context=None):
        return iter(())

    def invalidate_caches(self):
        pass


class _AlreadyServed:
    """The loader handing an import the module transfer already serves under that name.

    importlib builds a new module from any spec a finder returns, so the finder returns this one's, with the
    module out of sys.modules for that moment: `create_module` gives the module back, and `exec_module` (after
    importlib set the module's ``__spec__`` to this spec) restores its own."""

    def __init__(self, module):
        self.module, self.original = module, module.__spec__

    @classmethod
    def spec(cls, module):
        from importlib.machinery import ModuleSpec

        return ModuleSpec(module.__name__, cls(module), origin=module.__spec__.origin)

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        module.__spec__ = self.original

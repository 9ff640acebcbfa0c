"""Whose code a frame is (transfer.frames): torch's own, transfer's, or the user's.

torch's files are told from their siblings in site-packages (torchvision/, torch_npu/, torch-*.dist-info),
so a placeholder warns for a sibling package's call, and the report names its line.
"""

import os
import sys

import torch

from transfer import frames


def _run_as(filename, fn):
    """Call fn() from code whose file is `filename` (as if that file called it)."""
    namespace = {"fn": fn}
    exec(compile("result = fn()", filename, "exec"), namespace)
    return namespace["result"]


def test_frame_kinds_use_the_directory_separator():
    site = os.path.dirname(frames.TORCH_DIR.rstrip(os.sep))
    assert frames.file_kind(os.path.join(frames.TORCH_DIR, "nn", "modules", "batchnorm.py")) == frames.TORCH
    for sibling in ("torchvision", "torch_npu", "torchaudio", "torch-2.13.0.dist-info"):
        assert frames.file_kind(os.path.join(site, sibling, "ops.py")) == frames.USER, sibling
    parent = os.path.dirname(frames.PACKAGE_DIR.rstrip(os.sep))
    assert frames.file_kind(os.path.join(frames.PACKAGE_DIR, "devices.py")) == frames.PLUMBING
    assert frames.file_kind(os.path.join(parent, "transfer_learning", "train.py")) == frames.USER


def test_a_torchvision_like_sibling_is_the_users_code(cpu_target, caplog):
    """A placeholder warns for the user's call, not for torch's; torchvision's call is not torch's."""
    site = os.path.dirname(frames.TORCH_DIR.rstrip(os.sep))
    torch_file = os.path.join(frames.TORCH_DIR, "nn", "fake_module.py")
    sibling = os.path.join(site, "torchvision", "fake_ops.py")
    with caplog.at_level("WARNING", logger="transfer"):
        _run_as(torch_file, torch.cuda.get_device_capability)
        assert "get_device_capability" not in caplog.text
        _run_as(sibling, torch.cuda.get_device_capability)
    assert "torch.cuda.get_device_capability" in caplog.text  # the capability policy's notice
    assert frames.called_by_torch(_run_as(torch_file, lambda: sys._getframe(1)))
    assert not frames.called_by_torch(_run_as(sibling, lambda: sys._getframe(1)))


def test_the_report_names_a_sibling_packages_line(cpu_target):
    site = os.path.dirname(frames.TORCH_DIR.rstrip(os.sep))
    sibling = os.path.join(site, "torch_npu", "contrib.py")
    exec(compile("torch.arange(2.0).to('cuda:1')", sibling, "exec"), {"torch": torch})
    rows = [r for r in cpu_target.status()["translations"] if r["api"] == "Tensor.to" and r["argument"] == "'cuda:1'"]
    assert rows and rows[0]["first_site"] == f"{sibling}:1"


def test_the_users_script_is_neither_torch_nor_transfer_nor_an_installed_library():
    """`frames.is_script` (torch.accelerator answers cuda to the script alone); code compiled from a string
    is its runner's: the script's exec, torch's eval (dynamo's guards), ``python -c`` (no runner)."""
    site = os.path.dirname(frames.TORCH_DIR.rstrip(os.sep))
    here = lambda: sys._getframe(1)  # noqa: E731
    assert frames.is_script(_run_as("/home/me/train.py", here))
    assert frames.is_script(_run_as("/srv/site-packages-notes/model.py", here))
    for library in (os.path.join(site, "accelerate", "state.py"), "/usr/lib/python3/dist-packages/lib/x.py",
                    os.path.join(frames.TORCH_DIR, "accelerator", "_utils.py"),
                    os.path.join(frames.PACKAGE_DIR, "devices.py")):
        assert not frames.is_script(_run_as(library, here)), library
    def evaluated_in(filename):  # the frame of code compiled from a string, evaluated by `filename`'s code
        namespace = {"here": here}
        exec(compile("result = eval(compile('here()', '<string>', 'eval'))", filename, "exec"), namespace)
        return namespace["result"]

    assert evaluated_in("/home/me/train.py").f_code.co_filename == "<string>"
    assert frames.is_script(evaluated_in("/home/me/train.py"))
    assert not frames.is_script(evaluated_in(os.path.join(frames.TORCH_DIR, "_dynamo", "guards.py")))
    assert frames.is_script(eval(compile("sys._getframe(0)", "<string>", "eval")))  # the test file is USER too

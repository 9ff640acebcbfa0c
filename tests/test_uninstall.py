"""uninstall() restores only what is still transfer's.

An attribute someone patched again after transfer (a profiler wrapping torch.cuda.device_count, say) is
left in place, with one WARNING naming it; once that patch is undone, the next uninstall() restores
torch's original.
"""

import functools
import logging

import torch

import transfer


def test_uninstall_leaves_a_patch_made_after_transfer_and_restores_once_it_is_undone(install_cpu, caplog):
    original = torch.cuda.device_count
    try:
        install_cpu()
        ours = torch.cuda.device_count

        @functools.wraps(ours)
        def profiled():  # another library wraps the function after transfer installed
            return ours()

        torch.cuda.device_count = profiled
        with caplog.at_level(logging.WARNING, logger="transfer"):
            transfer.uninstall()
        assert torch.cuda.device_count is profiled  # not overwritten with torch's original
        said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(said) == 1 and "torch.cuda.device_count" in said[0] and "calls transfer's replacement" in said[0]
        assert torch.cuda.is_available() is False  # everything else is restored

        torch.cuda.device_count = profiled.__wrapped__  # the library undoes its patch: ours is back
        transfer.uninstall()  # nothing active: restores what was left behind, now that it is ours again
        assert torch.cuda.device_count is original

        # The same through a second install: it never takes our stale replacement for torch's original.
        install_cpu()
        torch.cuda.device_count = profiled2 = functools.wraps(torch.cuda.device_count)(lambda: 7)
        transfer.uninstall()
        torch.cuda.device_count = profiled2.__wrapped__
        install_cpu()
        transfer.uninstall()
        assert torch.cuda.device_count is original
    finally:
        transfer.uninstall()
        torch.cuda.device_count = original

"""transfer's banner and warnings leave the application's logging alone.

With no logging configured they reach stderr once (logging.lastResort); with logging configured before
or after install, once, in the application's format; transfer adds no handler and sets no level.
"""

from conftest import clean_env, python

#: The one line transfer says on the cpu target (the README's quick start shows it).
BANNER = "transfer: CUDA calls run on cpu (any CPU); float16 autocast runs as bfloat16; details: TRANSFER_REPORT=FILE"


LOGGING_PROBE = """
import logging
import torch
{configure}
torch.cuda.max_memory_allocated()  # the cpu target warns once: a placeholder value
log = logging.getLogger("transfer")
print("propagate", log.propagate, "handlers", len(log.handlers), "level", log.level)
"""


def test_no_logging_configured_banner_and_warnings_reach_stderr_once():
    proc = python("-c", LOGGING_PROBE.format(configure=""), env=clean_env(TRANSFER_DEVICE="cpu"))
    assert proc.stderr.count("transfer: CUDA calls run on cpu") == 1
    assert proc.stderr.count("max_memory_allocated") == 1, proc.stderr
    # one short line; the detail (nccl -> gloo among it) on request, through what an unmodified
    # script can use: TRANSFER_REPORT (not transfer.report(), which it cannot call)
    (banner,) = [line for line in proc.stderr.splitlines() if line.startswith("transfer: CUDA calls run on cpu")]
    assert banner == BANNER, banner
    assert "propagate True handlers 0 level 0" in proc.stdout  # nothing of the application's changed


def test_logging_configured_after_install_gets_transfers_records_once():
    configure = "logging.basicConfig(format='APP %(levelname)s %(name)s: %(message)s')"
    proc = python("-c", LOGGING_PROBE.format(configure=configure), env=clean_env(TRANSFER_DEVICE="cpu"))
    warned = [line for line in proc.stderr.splitlines() if "max_memory_allocated" in line]
    assert len(warned) == 1 and warned[0].startswith("APP WARNING transfer: "), proc.stderr
    assert "propagate True handlers 0" in proc.stdout


def test_logging_configured_before_install_shows_the_banner_once_in_its_format():
    code = ("import logging; logging.basicConfig(level=logging.INFO, format='APP %(name)s: %(message)s')\n"
            "from transfer import auto as _\n")
    proc = python("-c", code, env=clean_env(TRANSFER_DEVICE="cpu"))
    banners = [line for line in proc.stderr.splitlines() if "CUDA calls run on cpu" in line]
    assert banners == [line for line in banners if line.startswith("APP transfer: ")] and len(banners) == 1, \
        proc.stderr

"""The errors `transfer` raises. Each message names the problem and the fix."""


class TransferError(RuntimeError):
    """Base class of every error raised by `transfer`."""


class UnknownDeviceError(TransferError, ValueError):
    """TRANSFER_DEVICE (or install(device=...)) names no known profile."""


class VendorPackageMissing(TransferError, ImportError):
    """The selected vendor's PyTorch plug-in package cannot be imported."""


class NoDeviceError(TransferError):
    """The vendor package imported but reports no usable device."""


class UnsupportedCudaAPI(TransferError, NotImplementedError):
    """A `torch.cuda` API that the active target has no equivalent for."""


class ConflictError(TransferError, ImportError):
    """Another patcher of torch (a second copy of transfer, torch_npu's transfer_to_npu) is active
    in this process; the message says which one to remove."""


class CannNotSourced(TransferError):
    """Ascend software that needs CANN's environment (ASCEND_HOME_PATH, set by set_env.sh) ran without it."""

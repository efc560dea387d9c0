"""What :func:`eagle.clear_caches` does in eagle.cuda: drop the compiled images the
process keeps, and give back the device resources of loaded kernels and error records
nothing uses.

A loaded kernel (:class:`eagle.cuda.module.Kernel`) or an error record
(:mod:`eagle.cuda._records`) that is collected leaves its library or its
record slot behind, since a launch of it may still be running.
:func:`release_unused` waits for every device eagle has used, then unloads
those libraries and frees those slots; :func:`eagle.clear_caches` calls it.
"""

from __future__ import annotations

from eagle._cache import on_clear
from eagle.cuda import _records, module
from eagle.cuda._capture_state import any_capture_active
from eagle.cuda._runtime import cudart, ready_devices
from eagle.errors import EagleRuntimeError

__all__ = ["drop_images", "release_unused"]


def release_unused() -> None:
    """Unload the libraries of kernels and free the slots of error records nothing holds
    any more, once every device eagle has used is idle. Nothing happens (and no driver
    call is made) when there are none.

    Raises:
        RuntimeError: a stream capture is under way (waiting for a device is not legal
            then); call it again once the capture ends.
        CudaError: a device failed, or the driver refused to unload a library.
        Exception: the failure a freed error record held, as at any synchronizing call.
    """
    if not module._has_unused() and not _records.has_unused():
        return
    if any_capture_active():
        raise EagleRuntimeError(
            "eagle.clear_caches waits for the devices before it unloads the kernels nothing "
            "uses any more, which is not legal during a stream capture; call it again once "
            "the capture ends"
        )
    current = cudart.cudaGetDevice()
    for device in ready_devices():
        cudart.cudaSetDevice(device)
        cudart.cudaDeviceSynchronize()
    cudart.cudaSetDevice(current)
    try:
        _records.free_unused()
    finally:
        module._unload_unused()


def drop_images() -> None:
    """Drop the compiled images the process keeps (the disk cache keeps its own)."""
    with module._images_lock:
        module._images.clear()


on_clear(drop_images)
on_clear(release_unused)

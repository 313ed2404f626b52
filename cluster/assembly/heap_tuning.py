"""Keep a node process's large buffers in its heap instead of returning them to the kernel.

Replication moves chunks of up to haTransferBatchSize (1 MiB) through several buffers per
chunk (gRPC's receive buffer, the message, the data handed to the store). glibc serves a
block that large with its own mmap, or from the top of a heap it trims back to the kernel once
the free top passes a small threshold, so each such buffer starts on fresh pages: a page
fault per 4 KiB, about 200 per MiB on a catching-up slave (measured with /proc/<pid>/stat
minflt), where a VM pays dearly for each. With the thresholds below glibc reuses freed
memory: 35-40 faults per MiB, and catch-up went up by 10-70% in runs side by side.

The cost: up to TRIM_THRESHOLD of free memory may stay with each malloc arena. Only the node
process calls this (`python -m cluster node`); libraries and tests keep glibc's defaults.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 8 << 20  # blocks below this come from the heap (chunks are <= 1 MiB by default)
TRIM_THRESHOLD = 64 << 20  # a heap keeps this much free memory at its top


def keep_large_buffers() -> bool:
    """Set glibc's thresholds; False where there is no glibc mallopt (musl, macOS)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    ok = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    if not ok:
        log.info("mallopt refused the heap thresholds; glibc's defaults stay")
    return ok

"""CRC-32C (Castagnoli) of replication chunks.

CRC-32C rather than the commitlog's CRC-32: it is the checksum of the transport (gRPC frames
have none of their own), independent of the record CRCs the slave's reput checks later.

google-crc32c's C extension (SSE4.2 / ARMv8 CRC instructions: about 12 GB/s here) computes
it where it is installed with its native code; crcmod's table-driven C extension (about
450 MB/s, which bounded catch-up replication at one core) is the fallback where no wheel
exists. Both give the same values (tests/ha/test_crc.py). RMQSTORE_CRC32C=crcmod in the
environment forces the fallback (the catch-up benchmark measures both side by side).
"""
from __future__ import annotations

import os
from typing import Callable

import crcmod.predefined

crcmod_crc32c: Callable[[bytes], int] = crcmod.predefined.mkPredefinedCrcFun("crc-32c")


def _native() -> Callable[[bytes], int] | None:
    if os.environ.get("RMQSTORE_CRC32C", "") == "crcmod":
        return None
    try:
        import google_crc32c
    except ImportError:
        return None
    # its pure-Python fallback is far slower than crcmod: use it only when native
    if google_crc32c.implementation != "c":
        return None
    value = google_crc32c.value

    def crc(data: bytes) -> int:  # it takes only read-only bytes: copy the rare view
        return value(data if isinstance(data, bytes) else bytes(data))
    return crc


native_crc32c = _native()
crc32c: Callable[[bytes], int] = native_crc32c or crcmod_crc32c


def _extender() -> Callable[[int, bytes], int]:
    if native_crc32c is not None:
        import google_crc32c

        def extend(crc: int, data: bytes) -> int:
            return google_crc32c.extend(crc, data if isinstance(data, bytes) else bytes(data))
        return extend
    return lambda crc, data: crcmod_crc32c(data, crc)


crc32c_extend: Callable[[int, bytes], int] = _extender()
"""CRC-32C of (what `crc` covered) + `data`: a whole file checksummed block by block."""
IMPLEMENTATION = "google-crc32c" if native_crc32c is not None else "crcmod"

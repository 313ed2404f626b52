"""What one small flush costs once much of a file was written: the reason a SYNC_FLUSH commitlog
is advised MADV_RANDOM (store/commitlog/fileio.py, FileIO.advise_access).

A 1,201-byte record (a 1 KiB message's) is appended and made durable, one at a time, near the
start of a fresh preallocated file and again after `--mib` MiB of it were written in 128 KiB
steps, three ways in the same run: through the mapping with the kernel's default advice (what
the store did), through the mapping advised random (what a SYNC_FLUSH commitlog does now), and
with pwrite + fdatasync (writeWithoutMmap). With large page-cache folios (Linux 6.x) a small
msync writes back the whole folio around the record once the file's folios have grown.

    .venv/bin/python -m tests.perf.small_msync [--mib 64] [--samples 300]
"""
from __future__ import annotations

import argparse
import mmap
import os
import statistics
import tempfile
import time
from dataclasses import dataclass

from store.commitlog.fileio import DEFAULT_FILE_IO

RECORD = os.urandom(1201)
STEP = os.urandom(128 * 1024)
MODES = ("mmap, default advice", "mmap, advised random", "pwrite + fdatasync")


def preallocated_mmap(path: str, size: int) -> tuple[int, mmap.mmap]:
    """A file of `size` bytes reserved with posix_fallocate (as the store's files are) and its
    writable mapping."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, size)
    return fd, mmap.mmap(fd, size)


@dataclass(frozen=True)
class SmallFlush:
    mode: str
    fresh_us: float  # p50 of a record's append + flush near the start of the file
    after_us: float  # the same after `mib` MiB were written


def _one(directory: str, mode: str, mib: int, samples: int) -> SmallFlush:
    path = os.path.join(directory, "small-msync")
    size = (mib + 16) << 20
    fd, mm = preallocated_mmap(path, size)
    try:
        if mode == MODES[1]:
            DEFAULT_FILE_IO.advise_access(mm, 0, True, path)
        pos = 0

        def append_and_flush(data: bytes) -> None:
            nonlocal pos
            if mode == MODES[2]:
                os.pwrite(fd, data, pos)
                os.fdatasync(fd)
            else:
                mm[pos:pos + len(data)] = data
                DEFAULT_FILE_IO.msync(mm, pos, len(data), path)
            pos += len(data)

        def p50() -> float:
            out = []
            for _ in range(samples):
                started = time.perf_counter()
                append_and_flush(RECORD)
                out.append((time.perf_counter() - started) * 1e6)
            return statistics.median(out)

        fresh = p50()
        while pos < mib << 20:
            append_and_flush(STEP)
        return SmallFlush(mode, fresh, p50())
    finally:
        mm.close()
        os.close(fd)
        os.unlink(path)


def run(directory: str, mib: int = 64, samples: int = 300) -> list[SmallFlush]:
    return [_one(directory, mode, mib, samples) for mode in MODES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="small-msync-") as d:
        print(f"append + flush of one 1,201-byte record, p50 (µs): fresh file / after {args.mib} MiB")
        for r in run(d, args.mib, args.samples):
            print(f"  {r.mode:<22} {r.fresh_us:>8.0f} {r.after_us:>8.0f}")


if __name__ == "__main__":
    main()

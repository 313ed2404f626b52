"""Prefault: keep the pages just beyond the commitlog's write position allocated and mapped,
so the writer finds them in place instead of allocating a fresh page per 4 KiB itself.

The commitlog is written by pwritev into its files (MappedFile.append_many); the kernel
allocates each fresh page of the file on its first write, inside the writer's call. This
service does that ahead, for the next `prefault_ahead_bytes` of the last commitlog file, with
madvise(MADV_POPULATE_WRITE) (`FileIO.populate`, without the GIL), on another core while the
writer works; the pages are the mapping's too, so reput's reads of them do not fault either.
The pages read as zeros, as the preallocated file does, so nothing a reader or recovery sees
changes; only the work moves. A catching-up slave gains most: 551-599 MB/s with it against
403-435 without, interleaved on one host (tests/perf/README.md, "The commitlog is written by
pwrite"); a master under batched puts spends about 2 µs of CPU per message more with it,
on this thread.

It polls: every round it tops the window up to `ahead` bytes past the write position, so a
writer at 300 MB/s moves at most a few MiB between rounds of a 16 MiB window, and nothing on
the write path has to wake it. The next file is not created ahead: its first pages are
allocated by the writes themselves (once per file).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .service import Service

if TYPE_CHECKING:
    from .mapped_file import MappedFile
    from .mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)
# One madvise call. Small: the call holds the process's mmap lock for reading, and a thread
# that maps or unmaps (a large malloc, a new thread's stack) waits for it, and the page faults
# of every other thread then wait behind that one: with 4 MiB steps (about 10 ms each on a VM)
# sync puts stalled behind it.
STEP_BYTES = 256 << 10


class PrefaultService(Service):
    """Owns: which file it populated and how far (`_file`, `_done`); touched only by its thread
    (or a test calling `step()`). Reads the queue's last file and its write position without a
    lock (single attributes); the file's hold()/release() keeps the mapping alive meanwhile."""
    name = "commitlog-prefault"

    def __init__(self, queue: "MappedFileQueue", ahead: int, interval_s: float = 0.01) -> None:
        super().__init__()
        self.queue = queue
        self.ahead = ahead
        self.interval_s = interval_s
        self._file: MappedFile | None = None
        self._done = 0  # populated below this position of _file
        self.populated_bytes = 0

    def wait_interval(self) -> float:
        return self.interval_s

    def step(self) -> None:
        f = self.queue.last_file
        if f is None or self.ahead <= 0:
            return
        if f is not self._file:
            self._file, self._done = f, 0
        target = min(f.wrote_position + self.ahead, f.file_size)
        start = max(self._done, f.wrote_position)
        while start < target and not self._stopping.is_set():
            n = min(STEP_BYTES, target - start)
            try:
                ok = f.populate(start, n)
            except OSError as e:  # advisory: the writes fault the pages in themselves
                log.debug("prefault of %s at %d failed: %s", f.path, start, e)
                ok = False
            if not ok:
                self._done = f.file_size  # not again for this file
                return
            start += n
            self._done = start
            self.populated_bytes += n

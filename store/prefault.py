"""Prefault: keep the pages just beyond the commitlog's write position mapped and writable,
so appends copy into memory instead of taking a page fault per 4 KiB under the GIL.

Writing through the mapping into a fresh (preallocated) file faults every page in on its first
write, and CPython's `mm[a:b] = data` holds the GIL through those faults: on a VM about 2 ms per
MiB, more than everything else a catching-up slave does with a chunk. This service faults the
next `prefault_ahead_bytes` of the last commitlog file in with madvise(MADV_POPULATE_WRITE)
(`FileIO.populate`, without the GIL), on another core while the writer works. The pages read as
zeros, as the preallocated file does, so nothing a reader or recovery sees changes; only the
fault moves.

It polls: every round it tops the window up to `ahead` bytes past the write position, so a
writer at 300 MB/s moves at most a few MiB between rounds of a 16 MiB window, and nothing on
the write path has to wake it. The next file is not created ahead: its first pages fault as
before (once per file).
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

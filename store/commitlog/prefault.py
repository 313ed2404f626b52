"""Prefault: keep the pages just beyond the commitlog's write position allocated and mapped,
so the writer finds them in place instead of allocating a fresh page per 4 KiB itself.

The commitlog is written by pwritev into its files (MappedFile.append_many); the kernel
allocates each fresh page of the file on its first write, inside the writer's call. This
service does that ahead, for the next `prefault_ahead_bytes` of the last commitlog file, with
madvise(MADV_POPULATE_WRITE) (`FileIO.populate`, without the GIL), on another core while the
writer works; the pages are the mapping's too, so reput's reads of them do not fault either.
The pages read as zeros, as the preallocated file does, so nothing a reader or recovery sees
changes; only the work moves.

Where it pays: a catching-up slave, 551-599 MB/s with it against 403-435 without, interleaved
on one host (docs/performance/history.md, "The commitlog is written by pwrite"), and small appends
(single sends), which are copies into the mapping that fault each fresh page in under the GIL
(SYNC_FLUSH sequential sends: p99 1.42-1.48 ms with it against 1.62-1.78 without in one set of
pairs, within the noise in another). Where it does not:
a master's batched appends go by pwritev, which allocates the pages inside the call without
the GIL, so populating them ahead only adds work (a master's CPU per message 26.0-27.3 µs with
it, 23.9-24.3 without; "Prefault where it pays" in the same file). So on a master a round
populates only when most of the bytes appended since the last round were copies
(`MappedFile.pwritten_bytes` against the write position); a slave always does
(`always`, the node's role, read each round).

It polls: every round it tops the window up to `ahead` bytes past the write position, so a
writer at 300 MB/s moves at most a few MiB between rounds of a 16 MiB window, and nothing on
the write path has to wake it. The next file is not created ahead: its first pages are
allocated by the writes themselves (once per file).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from common.service import Service

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
    """Owns: which file it populated and how far (`_file`, `_done`) and where the last round
    saw its appends (`_seen`); touched only by its thread (or a test calling `step()`). Reads
    the queue's last file, its write position and pwritten bytes without a lock (single
    attributes); the file's hold()/release() keeps the mapping alive meanwhile."""
    name = "commitlog-prefault"

    def __init__(self, queue: "MappedFileQueue", ahead: int, interval_s: float = 0.01, *,
                 always: Callable[[], bool] = lambda: True) -> None:
        super().__init__()
        self.queue = queue
        self.ahead = ahead
        self.interval_s = interval_s
        self.always = always  # populate even while the appends go by pwritev (a slave)
        self._file: MappedFile | None = None
        self._done = 0  # populated below this position of _file
        self._seen = (0, 0)  # (write position, pwritten bytes) of _file at the last round
        self._bulk = False  # the appends seen last were mostly pwritev
        self.populated_bytes = 0
        self.skipped_rounds = 0  # rounds that found the appends bulk (pwritev) and did nothing

    def wait_interval(self) -> float:
        return self.interval_s

    def step(self) -> None:
        f = self.queue.last_file
        if f is None or self.ahead <= 0:
            return
        if f is not self._file:
            self._file, self._done, self._seen = f, 0, (0, 0)
        wrote, pwritten = f.wrote_position, f.pwritten_bytes
        seen_wrote, seen_pwritten = self._seen
        self._seen = (wrote, pwritten)
        if wrote > seen_wrote:  # no appends since the last round: as they were
            self._bulk = 2 * (pwritten - seen_pwritten) > wrote - seen_wrote
        if self._bulk and not self.always():
            self.skipped_rounds += 1  # mostly pwritev: the writer allocates its own pages
            return
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

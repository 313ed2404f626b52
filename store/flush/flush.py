"""Getting commitlog bytes to disk: ASYNC_FLUSH, SYNC_FLUSH group commit, and the commit step of
the write-buffer (transient store pool) mode.

- AsyncFlushService: every flushIntervalCommitLog, flush when at least flushCommitLogLeastPages
  dirty pages wait, and everything every flushCommitLogThoroughInterval.
- GroupCommitService (SYNC_FLUSH, `store/flush/group_commit.py`): leader-follower group commit on
  `FlushBase`.
- CommitService (transientStorePoolEnable): every commitIntervalCommitLog, pwrite the write
  buffers to the files (commitCommitLogLeastPages), then wake the flusher.

A failed flush or commit is final (`FlushFailure`): every waiter gets FLUSH_DISK_FAILED, the
store is told (it turns not writable), and no later round flushes again, because a later
"successful" fsync could cover pages the kernel already dropped.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from common.clock import Clock
from store.errors import DiskError
from store.commitlog.mapped_file import worth_flushing
from store.commitlog.mapped_file_queue import MappedFileQueue
from store.latency import LatencyHistogram
from common.service import Service

log = logging.getLogger(__name__)


class FlushFailure:
    """Shared, one-way failure state of the commitlog's flush path."""

    def __init__(self, on_failure: Callable[[DiskError], None]) -> None:
        self.error: DiskError | None = None
        self._on_failure = on_failure
        self._lock = threading.Lock()

    @property
    def failed(self) -> bool:
        return self.error is not None

    def record(self, error: DiskError) -> None:
        with self._lock:
            if self.error is not None:
                return
            self.error = error
        log.error("commitlog flush failed, store turns not writable: %s", error)
        self._on_failure(error)


class FlushBase(Service):
    """One flush round of the commitlog (`_flush`), shared by the ASYNC_FLUSH service and the
    SYNC_FLUSH group commit (`store/flush/group_commit.py`): a disk error is recorded as final, and
    a round that wrote something moves the checkpoint."""

    def __init__(self, queue: MappedFileQueue, clock: Clock, failure: FlushFailure,
                 on_flushed: Callable[[int, int], None], stamp: Callable[[], int]) -> None:
        super().__init__()
        self.queue = queue
        self.clock = clock
        self.failure = failure
        self.on_flushed = on_flushed  # (flushed offset, store time it covers): checkpoint
        self.stamp = stamp  # store timestamp of the newest appended record
        self.latency = LatencyHistogram()  # of the flushes that wrote something (metrics)

    def flush_now(self) -> bool:
        """One full flush round in the caller's thread (Admin.Flush); False on a disk error,
        which is recorded like a background round's."""
        return self._flush(0)

    def _flush(self, least_pages: int) -> bool:
        if self.failure.failed:
            return False
        before = self.queue.flushed_where
        # Taken first: the store time of the newest record appended so far, and where it ends.
        stamp = self.stamp()
        wrote = self.queue.max_wrote_offset()
        started = time.perf_counter()
        try:
            after = self.queue.flush(least_pages)
        except DiskError as e:
            self.failure.record(e)
            return False
        if after > before:
            self.latency.observe(time.perf_counter() - started)
            # The stamp goes to the checkpoint only when the flush covered that record: with
            # least pages a later file can stay unflushed, and a too-new physicMsgTimestamp
            # would make abnormal recovery start after data that never reached the disk.
            self._report_flushed(after, stamp if after >= wrote else 0)
        return True

    def _report_flushed(self, offset: int, stamp: int) -> None:
        """A round moved the flushed offset: tell the store (checkpoint stamp, reput)."""
        self.on_flushed(offset, stamp)


class AsyncFlushService(FlushBase):
    """ASYNC_FLUSH: flushes the commitlog every `interval_ms` when `least_pages` dirty pages
    wait, and everything every `thorough_interval_ms`; `due` tells a put whether waking it is
    worth a round. Runs on its service thread; `flush_now` (FlushBase) runs a full round in
    an admin's thread. No lock of its own: the queue moves `flushed_where` forward only, and
    a failure is recorded once in the shared FlushFailure."""

    name = "flush-commitlog"

    def __init__(self, queue: MappedFileQueue, clock: Clock, failure: FlushFailure,
                 on_flushed: Callable[[int, int], None], stamp: Callable[[], int], *, interval_ms: int, least_pages: int,
                 thorough_interval_ms: int) -> None:
        super().__init__(queue, clock, failure, on_flushed, stamp)
        self.interval_ms = interval_ms
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self._last_thorough = clock.monotonic()

    def step(self) -> None:
        least = self.least_pages
        now = self.clock.monotonic()
        if (now - self._last_thorough) * 1000 >= self.thorough_interval_ms:
            least = 0
            self._last_thorough = now
        self._flush(least)

    def due(self, end_offset: int) -> bool:
        """Whether a round now would flush something of the log up to `end_offset`. A put
        wakes the service only then: RocketMQ wakes it on every put, but here a wake-up is a
        thread hand-off under the GIL (about 50 µs of CPU per single put) for a round that
        mostly finds less than `least_pages` to flush. The timed rounds are unchanged."""
        flushed = self.queue.flushed_where
        size = self.queue.file_size
        if end_offset // size != flushed // size:
            return True  # the log rolled past a file that is not flushed yet: flushed whole
        least = self.least_pages
        if (self.clock.monotonic() - self._last_thorough) * 1000 >= self.thorough_interval_ms:
            least = 0
        return worth_flushing(end_offset, flushed, least)

    def wait_interval(self) -> float:
        return self.interval_ms / 1000.0

    def on_stop(self) -> None:
        self._flush(0)


class CommitService(Service):
    """Write-buffer mode: moves appended bytes into the files (pwrite), then wakes the flusher."""

    name = "commit-commitlog"

    def __init__(self, queue: MappedFileQueue, clock: Clock, failure: FlushFailure,
                 flusher: Service, *, interval_ms: int, least_pages: int,
                 thorough_interval_ms: int) -> None:
        super().__init__()
        self.queue = queue
        self.clock = clock
        self.failure = failure
        self.flusher = flusher
        self.interval_ms = interval_ms
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self._last_thorough = clock.monotonic()

    def step(self) -> None:
        if self.failure.failed:
            return
        least = self.least_pages
        now = self.clock.monotonic()
        if (now - self._last_thorough) * 1000 >= self.thorough_interval_ms:
            least = 0
            self._last_thorough = now
        before = self.queue.committed_where
        try:
            after = self.queue.commit(least)
        except DiskError as e:
            self.failure.record(e)
            return
        if after > before:
            self.flusher.wakeup()

    def wait_interval(self) -> float:
        return self.interval_ms / 1000.0

    def on_stop(self) -> None:
        if not self.failure.failed:
            try:
                self.queue.commit(0)
            except DiskError as e:
                self.failure.record(e)

"""Getting commitlog bytes to disk: ASYNC_FLUSH, SYNC_FLUSH group commit, and the commit step of
the write-buffer (transient store pool) mode.

- AsyncFlushService: every flushIntervalCommitLog, flush when at least flushCommitLogLeastPages
  dirty pages wait, and everything every flushCommitLogThoroughInterval.
- GroupCommitService (SYNC_FLUSH): putters submit their end offset and wait; each round flushes
  once for all of them and releases those with flushed >= end. A waiter past syncFlushTimeout
  gets FLUSH_DISK_TIMEOUT.
- CommitService (transientStorePoolEnable): every commitIntervalCommitLog, pwrite the write
  buffers to the files (commitCommitLogLeastPages), then wake the flusher.

A failed flush or commit is final (`FlushFailure`): every waiter gets FLUSH_DISK_FAILED, the
store is told (it turns not writable), and no later round flushes again, because a later
"successful" fsync could cover pages the kernel already dropped.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from .clock import Clock
from .completion import Completion
from .errors import DiskError
from .mapped_file_queue import MappedFileQueue
from .put_result import PutStatus
from .service import Service
from .yielding_lock import YieldingLock

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


class _FlushBase(Service):
    def __init__(self, queue: MappedFileQueue, clock: Clock, failure: FlushFailure,
                 on_flushed: Callable[[int, int], None], stamp: Callable[[], int]) -> None:
        super().__init__()
        self.queue = queue
        self.clock = clock
        self.failure = failure
        self.on_flushed = on_flushed  # (flushed offset, store time it covers): checkpoint
        self.stamp = stamp  # store timestamp of the newest appended record

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
        try:
            after = self.queue.flush(least_pages)
        except DiskError as e:
            self.failure.record(e)
            return False
        if after > before:
            # The stamp goes to the checkpoint only when the flush covered that record: with
            # least pages a later file can stay unflushed, and a too-new physicMsgTimestamp
            # would make abnormal recovery start after data that never reached the disk.
            self.on_flushed(after, stamp if after >= wrote else 0)
        return True


class AsyncFlushService(_FlushBase):
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


class GroupCommitService(_FlushBase):
    """SYNC_FLUSH: one flush per round for every waiting putter."""

    name = "group-commit"

    def __init__(self, queue: MappedFileQueue, clock: Clock, failure: FlushFailure,
                 on_flushed: Callable[[int, int], None], stamp: Callable[[], int], *,
                 timeout_ms: int) -> None:
        super().__init__(queue, clock, failure, on_flushed, stamp)
        self.timeout_ms = timeout_ms
        self._requests: list[tuple[int, Completion[PutStatus]]] = []
        self._lock = YieldingLock()  # every SYNC_FLUSH put takes it: must not convoy

    def submit(self, end_offset: int) -> Completion[PutStatus]:
        """A completion that resolves to PUT_OK once flushed >= end_offset."""
        done: Completion[PutStatus] = Completion(self.clock.monotonic() + self.timeout_ms / 1000.0)
        if self.failure.failed:
            done.complete(PutStatus.FLUSH_DISK_FAILED)
            return done
        if self.queue.flushed_where >= end_offset:
            done.complete(PutStatus.PUT_OK)
            return done
        with self._lock:
            self._requests.append((end_offset, done))
        self.wakeup()
        return done

    def step(self) -> None:
        with self._lock:
            requests, self._requests = self._requests, []
        ok = self._flush(0)
        flushed = self.queue.flushed_where
        now = self.clock.monotonic()
        keep: list[tuple[int, Completion[PutStatus]]] = []
        for end, done in requests:
            if not ok and self.failure.failed:
                done.complete(PutStatus.FLUSH_DISK_FAILED)
            elif flushed >= end:
                done.complete(PutStatus.PUT_OK)
            elif now >= done.deadline:
                done.complete(PutStatus.FLUSH_DISK_TIMEOUT)
            else:
                keep.append((end, done))
        if keep:
            with self._lock:
                self._requests[0:0] = keep

    def wait_interval(self) -> float:
        return 0.01

    def pending(self) -> int:
        with self._lock:
            return len(self._requests)

    def on_stop(self) -> None:
        self.step()
        with self._lock:
            requests, self._requests = self._requests, []
        for _, done in requests:
            done.complete(PutStatus.FLUSH_DISK_TIMEOUT)

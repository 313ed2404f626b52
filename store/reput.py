"""Reput: reads committed records from `reput_from_offset` and feeds the dispatchers.

Each step decodes from the current offset up to a bound: the readable end of the commitlog,
lowered to the flushed offset under SYNC_FLUSH (RocketMQ #8240: consumers never see what a
crash could take away) and to the confirm offset when replication requires it. Records are
checked (no CRC: recovery already did that) and turned into DispatchRequests by one walk
(store.commitlog.commitlog_walk with codec.dispatch_fields, a one-pass check and decode); a BLANK moves
to the next file. A corrupt record stops reput and is reported, never skipped silently.

A master's own puts are not decoded again: each put leaves the DispatchRequest of its record
in `hints` (dispatch.dispatch_hint, built from the message it encoded and completed under the
put lock before the bytes are written), and reput takes a hinted record as it is. Records
without a hint (a slave's, the schedule topic's, those written past HINTS_MAX, a torn run
after a cut) are decoded; tests/store/test_dispatch_hints.py checks that both give the same.

The records of one step (up to `batch_bytes`) go to each dispatcher as one batch where it
takes batches (`dispatch_many`): the index then pays its lock, file lookup and header write
once per step, not once per record. A dispatcher that fails is retried record by record to
find where; reput resumes at that record next round.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Iterator, Sequence

from . import codec
from .commitlog.commitlog import CommitLog
from .commitlog.commitlog_walk import CommitLogWalk, Stop
from .codec.dispatch import HINTS_MAX, Dispatcher, DispatchRequest, request_from_fields
from common.service import Service

log = logging.getLogger(__name__)


class ReputService(Service):
    """Moves `reput_from_offset` through the commitlog and feeds the dispatchers (consume
    queues, index, listeners): owns that offset, the put hints (`hints`), and the corrupt and
    dispatch-error state it reports (`corrupt_at`, `dispatch_error`, `on_error`).

    `_lock` lets one stepper run at a time (the service thread or a caller catching up); the
    store also takes it to truncate (which moves `reput_from_offset` back) and to prepare a
    new master; `load` sets the offset before any thread runs. `hints` takes no lock: puts
    add and reput pops single keys, and dict operations are atomic. Other threads read
    `reput_from_offset` and the error fields unlocked (single attributes)."""

    name = "reput"

    def __init__(self, commitlog: CommitLog, dispatchers: Sequence[Dispatcher],
                 delay_level_ms: Callable[[int], int], *,
                 bound: Callable[[], int] | None = None, batch_bytes: int = 4 << 20) -> None:
        super().__init__()
        self.commitlog = commitlog
        self.dispatchers = list(dispatchers)
        self.delay_level_ms = delay_level_ms
        self.bound = bound  # extra upper bound (flushed / confirm offset); None = readable end
        self.batch_bytes = batch_bytes
        self.reput_from_offset = 0
        self.corrupt_at: int | None = None
        self.dispatch_error: str | None = None
        self._error_at = -1
        self.on_error: Callable[[str], None] | None = None  # the store marks itself not writable
        self.on_error_cleared: Callable[[], None] | None = None
        self.listeners: list[Callable[[list[DispatchRequest]], None]] = []
        # commitlog offset -> the request of the record a put wrote there (dispatch_hint),
        # added by CommitLog under its put lock before the bytes, taken here; cleared when
        # the log is cut. Dict operations are atomic, so the two sides take no common lock.
        self.hints: dict[int, DispatchRequest] = {}
        self._lock = threading.Lock()  # one stepper at a time (thread or a caller catching up)

    def behind(self) -> int:
        return max(0, self._end() - self.reput_from_offset)

    def _end(self) -> int:
        end = self.commitlog.max_offset()
        if self.bound is not None:
            end = min(end, self.bound())
        return end

    def step(self) -> None:
        self.dispatch_available()

    def dispatch_available(self, max_bytes: int | None = None) -> int:
        """Dispatch what is available now (up to max_bytes); returns the number dispatched."""
        with self._lock:
            return self._dispatch(max_bytes or self.batch_bytes)

    def catch_up(self) -> int:
        """Dispatch until nothing is left below the bound (used at startup and in tests)."""
        total = 0
        while True:
            n = self.dispatch_available()
            total += n
            if n == 0:
                return total

    def _dispatch(self, max_bytes: int) -> int:
        offset = self.reput_from_offset
        if offset < self.commitlog.min_offset():
            offset = self.commitlog.min_offset()  # retention removed what reput never reached
        requests, offset, stop = self._read(offset, self._end(), max_bytes)
        failed = self._feed(requests) if requests else None
        if failed is not None:  # retried from that record next round
            offset = requests[failed].commit_log_offset
            del requests[failed:]
        elif stop is Stop.CORRUPT:
            # Also when dispatch_fields refused what check_record calls a record: stop loudly
            # rather than wait forever for the record to appear. EMPTY / NEED_MORE: the rest
            # is not written yet.
            if self.corrupt_at != offset:
                log.error("reput stopped: corrupt record at offset %d", offset)
            self.corrupt_at = offset
        count = len(requests)
        self.reput_from_offset = offset
        if count and self.dispatch_error is not None and offset > self._error_at:
            self.dispatch_error = None
            if self.on_error_cleared is not None:
                self.on_error_cleared()
        if requests:
            for listener in self.listeners:
                listener(requests)
        return count

    def _read(self, offset: int, end: int, max_bytes: int
              ) -> tuple[list[DispatchRequest], int, Stop | None]:
        """The requests of the records from `offset` (below `end`, about max_bytes of them),
        where the walk stopped, and why (None: at a hinted record). A record with a hint
        (dispatch_hint, left by the put that wrote it) is taken as it is; the others are
        decoded: all of them when there are no hints, else one record or BLANK at a time, so
        the walk does not decode what the hints already hold."""
        limit = offset + max_bytes
        hints = self.hints
        out: list[DispatchRequest] = []
        stop: Stop | None = None
        while offset < end and offset < limit:
            if hints:
                offset = self._take_hints(offset, end, limit, out)
                if offset >= end or offset >= limit:
                    break
            walked, walk = self._walk(offset, end, offset + 1 if hints else limit)
            if hints:
                for request in walked:
                    hints.pop(request.commit_log_offset, None)
            out += walked
            moved, offset, stop = walk.offset > offset, walk.offset, walk.stop
            if stop is not Stop.LIMIT or not moved:
                break
        if len(hints) >= HINTS_MAX:  # puts stopped leaving hints: drop those left behind
            # list() copies the keys in one C call: a put may add a hint meanwhile
            for stale in [k for k in list(hints) if k < offset]:
                hints.pop(stale, None)
        return out, offset, stop

    def _take_hints(self, offset: int, end: int, limit: int,
                    out: list[DispatchRequest]) -> int:
        """Append the hinted records from `offset` on (each below `end`) to `out`; returns
        the offset after the last one taken."""
        hints = self.hints
        while offset < end and offset < limit:
            request = hints.pop(offset, None)
            if request is None:
                break
            if request.commit_log_offset + request.msg_size > end:
                hints[offset] = request  # not below the bound yet (flush, confirm)
                break
            out.append(request)
            offset += request.msg_size
        return offset

    def _walk(self, offset: int, end: int, until: int
              ) -> tuple[list[DispatchRequest], CommitLogWalk]:
        """Decode the records from `offset` below `end`, none starting at or after `until`."""
        # One pass checks and decodes each record (dispatch_fields: the same rules as
        # check_record); only when it is not one does the walk ask what lies there. The
        # requests hold copies (ints and str), so the files are released before dispatch.
        delay_level_ms = self.delay_level_ms
        walk = CommitLogWalk(decode=codec.dispatch_fields)
        records = walk.mapped(self.commitlog.queue, offset, end, until)
        try:
            requests = [request_from_fields(fields, phy, delay_level_ms)
                        for phy, fields in records]
        finally:
            records.close()
        return requests, walk

    def requests_between(self, start: int, end: int) -> Iterator[list[DispatchRequest]]:
        """The records in [start, end) again, a batch at a time, for one dispatcher that lost
        what it had been given (the index process after a restart). Call under reput's lock
        (a dispatcher's dispatch_many is): `end` is at most where reput stands, so the
        bytes are dispatched ones and no truncation moves under the walk."""
        offset = max(start, self.commitlog.min_offset())
        while offset < end:
            requests, walk = self._walk(offset, end, offset + self.batch_bytes)
            if requests:
                yield requests
            if walk.offset <= offset:
                return  # a stop in the data: reput reports it on its own walk
            offset = walk.offset

    def _feed(self, requests: list[DispatchRequest]) -> int | None:
        """Hand the requests to every dispatcher in turn, a whole batch to one that has
        `dispatch_many` (one lock and one header write per batch instead of per record);
        returns the position of the first request a dispatcher failed on, else None. The
        dispatchers after a failure get only the requests before it; the ones before it may
        have gone further, which is safe because a dispatcher skips what it already holds
        (a consume-queue unit at its index, an index entry below the index's end offset)."""
        limit = len(requests)
        failed: int | None = None
        for d in self.dispatchers:
            batch = requests if limit == len(requests) else requests[:limit]
            many = getattr(d, "dispatch_many", None)
            if many is not None:
                try:
                    many(batch)
                    continue
                except Exception:  # find the record it fails on, one at a time
                    pass
            for i, req in enumerate(batch):
                if not req.dispatchable:
                    continue
                try:
                    d.dispatch(req)
                except Exception as e:
                    self._dispatch_failed(req.commit_log_offset, e)
                    limit = failed = i
                    break
        return failed

    def _dispatch_failed(self, offset: int, error: Exception) -> None:
        message = f"dispatch of the record at {offset} failed: {error}"
        if message != self.dispatch_error:
            log.error("%s (retrying)", message)
        self.dispatch_error = message
        self._error_at = offset
        if self.on_error is not None:
            self.on_error(message)

    def wait_interval(self) -> float:
        if self.dispatch_error is not None:
            return 1.0
        return 0.001 if self.behind() else 0.005

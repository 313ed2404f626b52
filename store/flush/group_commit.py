"""SYNC_FLUSH group commit: a putter waiting for its end offset flushes itself when no flush
is in progress, for everything appended so far; putters arriving meanwhile sleep until a flush
covers them, and the service thread (or one of them when it is not running) flushes next for
the rest. A waiter past syncFlushTimeout gets FLUSH_DISK_TIMEOUT; a failed flush is final
(`flush.FlushFailure`). A put waits through a `FlushWait`: in a thread as such a putter, on an
event loop for a completion the service thread resolves.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Generator

from common.clock import Clock
from common.completion import Completion
from store.errors import FlushTimeout
from .flush import FlushFailure, FlushBase
from store.commitlog.mapped_file_queue import MappedFileQueue
from store.put_result import PutResult, PutStatus


class _Waiter:
    """A thread blocked in GroupCommitService.wait_flushed: its end offset and its gate, a lock
    held while it sleeps. Reused by its thread (one wait at a time), so a put allocates none."""
    __slots__ = ("end", "gate", "lead")

    def __init__(self) -> None:
        self.end = 0
        self.gate = threading.Lock()
        self.gate.acquire()
        self.lead = False  # set by the releasing leader: the woken thread flushes next


class FlushWait:
    """A stored put's wait for the group commit to flush past its end, and the put's answer
    then (`answer(result, status)`: the store's, which counts a failed put). The store decides
    whether a put waits at all (MessageStore.flush_wait); the caller waits as it runs, and each
    way holds nothing but the wait itself:

    - `wait()`, in a thread, joins the group commit as a putter (`wait_flushed`): the thread
      may flush for the whole group itself, so a lone putter needs no hand-off;
    - `await flush_wait`, on an event loop, awaits a completion that the service thread
      resolves (`submit`; Completion.wait_async carries it to the loop). A loop does not flush
      itself: a flush there stalls every call the node serves (docs/performance/history.md).

    Made for one put and waited for once; nothing in it changes."""
    __slots__ = ("_group", "_result", "_timeout_s", "_answer")

    def __init__(self, group: "GroupCommitService", result: PutResult, timeout_s: float,
                 answer: Callable[[PutResult, PutStatus], PutResult]) -> None:
        self._group = group
        self._result = result
        self._timeout_s = timeout_s  # syncFlushTimeout
        self._answer = answer

    def wait(self) -> PutResult:
        result = self._result
        return self._answer(result, self._group.wait_flushed(result.end_offset, self._timeout_s))

    def __await__(self) -> Generator[Any, None, PutResult]:
        return self._awaited().__await__()

    async def _awaited(self) -> PutResult:
        result = self._result
        # the service times the completion out itself after a round; the margin covers a
        # round that is stuck in its flush
        status = await self._group.submit(result.end_offset).wait_async(self._timeout_s + 0.5)
        return self._answer(result, status or PutStatus.FLUSH_DISK_TIMEOUT)


class GroupCommitService(FlushBase):
    """SYNC_FLUSH group commit, leader-follower: a putter that finds its end not yet flushed
    and no flush in progress becomes the leader and flushes (msync / fdatasync) in its own
    thread for everything appended so far; putters that arrive meanwhile sleep on their own
    gate. When the flush returns, the leader releases every waiter it covered and hands the
    next flush to the service thread if waiters it did not cover remain (their appends landed
    after the flush started). The service thread then flushes round after round, releasing
    each round's waiters, until none is left uncovered, and gives the leadership up. A lone
    putter thus flushes for itself with no hand-off at all, and under load the flushes run
    back to back with no hand-off between them: one wake-up per put, one flush per group.
    (Handing the next flush to a woken waiter instead costs a wake-up and a wait for the GIL
    between every two flushes: 170-200 µs on a 300 µs msync, 7-8.6k against 9.4-10k msg/s
    with 8 putters in one run.) When the service thread is not running (stopping, or a test
    stepping it) the next flush goes to the first uncovered waiter as before.

    The service thread also flushes what nobody waits for (appends that did not ask for a
    flush, replicated bytes) every 10 ms and serves `submit()` completions (callers that do
    not block in a putter's thread); it takes the same leadership, so there is never more than
    one flush at a time.

    `_mutex` guards `_leading`, `_service_leads`, `_waiters` and `_requests`; it is never held
    across a flush or a wake-up. `_deferred` (the round's flushed offset, reported to the store
    after the round's releases) belongs to the leading thread: written in its flush, taken
    under `_mutex` before the leadership passes on."""

    name = "group-commit"

    def __init__(self, queue: MappedFileQueue, clock: Clock, failure: FlushFailure,
                 on_flushed: Callable[[int, int], None], stamp: Callable[[], int], *,
                 timeout_ms: int) -> None:
        super().__init__(queue, clock, failure, on_flushed, stamp)
        self.timeout_ms = timeout_ms
        self._mutex = threading.Lock()
        self._leading = False
        self._waiters: list[_Waiter] = []
        self._requests: list[tuple[int, Completion[PutStatus]]] = []
        self._local = threading.local()
        self._service_leads = False  # the leadership was passed to the service thread
        self.rounds = 0  # flushes made (diagnostics: puts per round)
        self._deferred: tuple[int, int] | None = None  # the leading round's flushed offset

    # -- blocking wait (the put path) ----------------------------------------------------------
    def wait_flushed(self, end_offset: int, timeout_s: float) -> PutStatus:
        """Block until flushed >= end_offset (PUT_OK), the flush failed (FLUSH_DISK_FAILED,
        for good) or `timeout_s` real seconds passed (FLUSH_DISK_TIMEOUT). The caller may
        become the leader and flush for everybody; a leader's own wait is then bounded by that
        flush, not by the timeout."""
        queue = self.queue
        if queue.flushed_where >= end_offset:
            return PutStatus.PUT_OK
        deadline = time.monotonic() + timeout_s
        w = None
        led = False
        while True:
            with self._mutex:
                flushed = queue.flushed_where
                if flushed >= end_offset:
                    return PutStatus.PUT_OK
                if self.failure.failed:
                    return PutStatus.FLUSH_DISK_FAILED
                if time.monotonic() >= deadline:
                    return PutStatus.FLUSH_DISK_TIMEOUT
                # After its own flush, a caller whose end lies past the log (cut by a
                # truncation, or not yet appended) waits instead of flushing nothing again.
                lead = not self._leading and not (led and queue.max_wrote_offset() <= flushed)
                if lead:
                    self._leading = True
                else:
                    if w is None:
                        w = self._waiter()
                    w.end = end_offset
                    self._waiters.append(w)
            if lead:
                led = True
                self._lead()
                continue
            if not w.gate.acquire(timeout=max(0.0, deadline - time.monotonic())):
                with self._mutex:
                    if w in self._waiters:  # nobody released it: a real timeout
                        self._waiters.remove(w)
                        return PutStatus.FLUSH_DISK_TIMEOUT
                w.gate.acquire()  # released concurrently: take the release it got
            if w.lead:
                w.lead = False
                led = True
                self._lead()

    def _waiter(self) -> _Waiter:
        w = getattr(self._local, "waiter", None)
        if w is None:
            w = self._local.waiter = _Waiter()
        return w

    def _lead(self, by_service: bool = False) -> bool:
        """One flush as the leader (`_leading` set by the caller), then release everybody it
        covered and pass the leadership on, or give it up. The release happens even if the
        flush raised something unexpected: a leadership left set would stall every put.
        True when the leadership stays with the service thread (`by_service`): it flushes
        again for the waiters this round did not cover."""
        try:
            self._flush(0)
        finally:
            self.rounds += 1
            kept = self._release_after_flush(by_service)
        return kept

    def _report_flushed(self, offset: int, stamp: int) -> None:
        # Held until the round's waiters and completions are released (_release_after_flush):
        # telling the store wakes reput, whose dispatch would otherwise take the GIL first from
        # the threads and the event loop that answer the puts this round made durable.
        self._deferred = (offset, stamp)

    def _release_after_flush(self, by_service: bool) -> bool:
        failed = self.failure.failed
        flushed = self.queue.flushed_where
        now = self.clock.monotonic()
        done: list[tuple[Completion[PutStatus], PutStatus]] = []
        nxt = None
        to_service = False
        with self._mutex:
            # taken while this thread still leads: the next leader's round sets its own
            deferred, self._deferred = self._deferred, None
            waiters = self._waiters
            if failed:
                wake, self._waiters = waiters, []
            else:
                wake = [w for w in waiters if w.end <= flushed]
                if len(wake) < len(waiters):
                    rest = [w for w in waiters if w.end > flushed]
                    # Hand on only when there is more to flush: a waiter whose end lies past
                    # the log (cut by a truncation) would otherwise pass it round and round.
                    if self.queue.max_wrote_offset() > flushed:
                        if self._thread is not None and not self._stopping.is_set():
                            to_service = True
                        else:
                            nxt = rest.pop(0)
                    self._waiters = rest
                else:
                    self._waiters = []
            if self._requests:
                keep: list[tuple[int, Completion[PutStatus]]] = []
                for end, c in self._requests:
                    if failed:
                        done.append((c, PutStatus.FLUSH_DISK_FAILED))
                    elif end <= flushed:
                        done.append((c, PutStatus.PUT_OK))
                    elif now >= c.deadline:
                        done.append((c, PutStatus.FLUSH_DISK_TIMEOUT))
                    else:
                        keep.append((end, c))
                self._requests = keep
                if (keep and by_service and nxt is None and not self._stopping.is_set()
                        and self.queue.max_wrote_offset() > flushed):
                    to_service = True  # completions wait for bytes appended meanwhile
            if nxt is not None:
                nxt.lead = True  # `_leading` stays set: the leadership passes to nxt
            elif to_service:
                self._service_leads = not by_service  # `_leading` stays set
            else:
                self._leading = False
        if nxt is not None:
            nxt.gate.release()
        for w in wake:
            w.gate.release()
        for c, status in done:
            c.complete(status)
        if deferred is not None:
            self.on_flushed(*deferred)
        if to_service and not by_service:
            self.wakeup()
        return to_service and by_service

    # -- completions (callers that do not block in the put path) ------------------------------
    def submit(self, end_offset: int) -> Completion[PutStatus]:
        """A completion that resolves to PUT_OK once flushed >= end_offset: flushed by the
        next leader or by the service thread, which this wakes."""
        done: Completion[PutStatus] = Completion(self.clock.monotonic() + self.timeout_ms / 1000.0)
        if self.failure.failed:
            done.complete(PutStatus.FLUSH_DISK_FAILED)
            return done
        if self.queue.flushed_where >= end_offset:
            done.complete(PutStatus.PUT_OK)
            return done
        with self._mutex:
            self._requests.append((end_offset, done))
        self.wakeup()
        return done

    def step(self) -> None:
        """One round of the service thread: flush (as the leader) unless a putter is flushing
        now (that leader then serves the completions), and go on flushing while waiters or
        completions remain that the last round did not cover. Also takes over a leadership a
        putter passed on (`_service_leads`)."""
        with self._mutex:
            if self._service_leads:
                self._service_leads = False  # a putter passed the leadership on to us
            elif self._leading:
                return
            else:
                self._leading = True
        while self._lead(by_service=True):
            pass

    def flush_now(self) -> bool:
        """Admin.Flush: returns once everything appended before the call is flushed, False on
        a disk error. It joins the group commit as a putter does (waits for the round that
        covers it, or leads one when nobody flushes), so a steady stream of putters cannot
        starve it: waiting for the leadership to fall free could wait for as long as the
        stream lasts. Raises FlushTimeout after syncFlushTimeout."""
        target = self.queue.max_wrote_offset()
        timeout_s = self.timeout_ms / 1000.0
        status = self.wait_flushed(target, timeout_s)
        if status is PutStatus.FLUSH_DISK_TIMEOUT:
            raise FlushTimeout(target, self.queue.flushed_where, timeout_s)
        return status is PutStatus.PUT_OK

    def wait_interval(self) -> float:
        return 0.01

    def pending(self) -> int:
        with self._mutex:
            return len(self._requests) + len(self._waiters)

    def on_stop(self) -> None:
        self.step()
        with self._mutex:
            requests, self._requests = self._requests, []
        for _, done in requests:
            done.complete(PutStatus.FLUSH_DISK_TIMEOUT)

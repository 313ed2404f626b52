"""SYNC_FLUSH group commit, leader-follower: a waiter flushes for the whole group itself, putters
that arrive during a flush wait for the next one, and nobody is answered before a flush that
covers its offset returned. Real files; `GatedIO` holds each msync until the test lets it go,
so the rounds are stepped by hand."""
from __future__ import annotations

import os
import threading

import pytest

from common.clock import ManualClock
from store.errors import FlushTimeout
from store.flush.flush import FlushFailure
from store.flush.group_commit import GroupCommitService
from store.commitlog.mapped_file_queue import MappedFileQueue
from store.message_store import MessageStore
from store.put_result import PutStatus
from tests.faults import EIO, FaultyFileIO
from tests.support.small_store import config, msg

PAGE = 4096


class RecordingIO(FaultyFileIO):
    """Records the log ranges each msync made durable, once the real msync returned.
    `gated`: every msync first waits for `proceed` (the test steps the flushes)."""

    def __init__(self, log_dir: str, gated: bool = False) -> None:
        super().__init__()
        self.log_dir = log_dir
        self.gated = gated
        self.entered = threading.Semaphore(0)
        self.proceed = threading.Semaphore(0)
        self.synced: list[tuple[int, int]] = []
        self.flushed_by: list[str] = []  # the thread that made each msync
        self._ranges_lock = threading.Lock()

    def msync(self, mm, offset: int, length: int, path: str) -> None:
        self.flushed_by.append(threading.current_thread().name)
        if self.gated:
            self.entered.release()
            assert self.proceed.acquire(timeout=10), "the test never let the msync go"
        super().msync(mm, offset, length, path)
        base = self.log_file_offset(path)
        if base is not None:
            with self._ranges_lock:
                self.synced.append((base + offset, base + offset + length))

    def log_file_offset(self, path: str) -> int | None:
        """The offset a log file starts at (its name); None for other files (queues, index)."""
        if os.path.dirname(path) != self.log_dir:
            return None
        return int(os.path.basename(path))

    def durable_end(self) -> int:
        """End of the prefix of the log covered by msyncs that returned."""
        with self._ranges_lock:
            ranges = sorted(self.synced)
        end = 0
        for start, stop in ranges:
            if start > end:
                break
            end = max(end, stop)
        return end

    def step_one(self) -> None:
        """Wait for the next msync to start, then let it run."""
        assert self.entered.acquire(timeout=10), "no flush started"
        self.proceed.release()


def service(tmp_path, io: RecordingIO):
    q = MappedFileQueue(str(tmp_path), PAGE * 16, io)
    errors: list = []
    svc = GroupCommitService(q, ManualClock(), FlushFailure(errors.append), lambda o, s: None,
                             lambda: 0, timeout_ms=5000)
    return svc, q, errors


def write(q: MappedFileQueue, n: int) -> int:
    f = q.get_last_file_for_write()
    f.append(b"x" * n)
    return f.file_from_offset + f.wrote_position


def waiting(svc: GroupCommitService, end: int, timeout_s: float = 10.0):
    """A thread blocked in wait_flushed(end); returns (thread, result list)."""
    out: list[PutStatus] = []
    t = threading.Thread(target=lambda: out.append(svc.wait_flushed(end, timeout_s)), daemon=True)
    t.start()
    return t, out


def until(predicate, timeout: float = 10.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.005)):
        if predicate():
            return
        done.wait(0.005)
    raise AssertionError("condition not reached")


def leader_in_its_flush(tmp_path):
    """A gated service whose first waiter A leads and sits in its msync (held by the test)."""
    io = RecordingIO(str(tmp_path), gated=True)
    svc, q, errors = service(tmp_path, io)
    end1 = write(q, 100)
    a, ra = waiting(svc, end1)
    assert io.entered.acquire(timeout=10)  # A found no flush in progress: it flushes itself
    return io, svc, q, errors, end1, a, ra


def test_a_waiter_leads_and_one_flush_covers_everybody_who_arrived_meanwhile(tmp_path):
    io, svc, q, _, end1, a, ra = leader_in_its_flush(tmp_path)
    end2 = write(q, 100)
    b, rb = waiting(svc, end2)
    end3 = write(q, 100)
    c, rc = waiting(svc, end3)
    until(lambda: svc.pending() == 2)  # B and C wait: a flush is in progress
    io.proceed.release()  # A's flush (up to end1) returns
    a.join(10)
    assert ra == [PutStatus.PUT_OK] and io.durable_end() == end1
    assert io.entered.acquire(timeout=10)  # one of B and C flushes for both
    assert rb == [] and rc == []  # not answered before the flush that covers them returned
    io.proceed.release()
    b.join(10)
    c.join(10)
    assert rb == [PutStatus.PUT_OK] and rc == [PutStatus.PUT_OK]
    assert io.calls["msync"] == 2 and io.durable_end() == end3 == q.flushed_where
    assert svc.pending() == 0


def test_a_running_service_thread_takes_the_leadership_over_from_a_putter(tmp_path):
    """Under load the flushes run back to back in the service thread: a putter that led hands
    the next flush to it instead of waking a waiter to flush (a hand-off per round less), and
    it keeps flushing while waiters it did not cover remain; stopping it leaves none behind."""
    io = RecordingIO(str(tmp_path), gated=True)
    svc, q, _ = service(tmp_path, io)
    svc.start()
    try:
        a, ra = waiting(svc, write(q, 100))
        io.step_one()  # A (or the service's own round) flushes up to A's end
        a.join(10)
        assert ra == [PutStatus.PUT_OK]
        b, rb = waiting(svc, write(q, 100))
        assert io.entered.acquire(timeout=10)  # B leads (or the service's timed round does)
        c, rc = waiting(svc, write(q, 100))
        d, rd = waiting(svc, write(q, 100))
        until(lambda: svc.pending() == 2)
        io.proceed.release()  # B's flush returns; C and D are not covered by it
        b.join(10)
        assert rb == [PutStatus.PUT_OK]
        assert io.entered.acquire(timeout=10)
        assert io.flushed_by[-1] == "group-commit"  # not C's or D's thread
        e, re_ = waiting(svc, write(q, 100))
        until(lambda: svc.pending() == 3)
        io.proceed.release()
        c.join(10)
        d.join(10)
        assert rc == rd == [PutStatus.PUT_OK] and re_ == []
        assert io.entered.acquire(timeout=10)
        assert io.flushed_by[-1] == "group-commit"  # still the service, for E
        io.proceed.release()
        e.join(10)
        assert re_ == [PutStatus.PUT_OK] and svc.pending() == 0
        assert io.durable_end() == q.max_wrote_offset() == q.flushed_where
    finally:
        io.gated = False
        svc.stop()


def test_an_admin_flush_is_not_starved_by_a_stream_of_putters(tmp_path):
    """flush_now (Admin.Flush) joins the group commit like a putter: it returns once a round
    covered what was appended before it was called, even though putters keep the service
    thread leading round after round (waiting for the leadership to fall free waited for as
    long as the stream lasted)."""
    io = RecordingIO(str(tmp_path), gated=True)
    svc, q, _ = service(tmp_path, io)
    svc.start()
    try:
        b, rb = waiting(svc, write(q, 100))
        assert io.entered.acquire(timeout=10)  # B's flush (or the service's round) is held
        c, rc = waiting(svc, write(q, 100))
        target = q.max_wrote_offset()
        done: list[tuple[bool, int]] = []
        f = threading.Thread(target=lambda: done.append((svc.flush_now(), q.flushed_where)),
                             daemon=True)
        f.start()
        until(lambda: svc.pending() == 2)  # C and the admin flush wait for the next round
        io.proceed.release()
        assert io.entered.acquire(timeout=10)  # the service flushes for C and the admin
        d, rd = waiting(svc, write(q, 100))  # the stream goes on: D arrives meanwhile
        until(lambda: svc.pending() == 3)
        io.proceed.release()
        f.join(10)
        assert len(done) == 1 and done[0][0] and done[0][1] >= target
        assert io.entered.acquire(timeout=10)  # the service goes on leading, for D
        assert io.flushed_by[-1] == "group-commit" and rd == []
        io.proceed.release()
        for t in (b, c, d):
            t.join(10)
        assert rb == rc == rd == [PutStatus.PUT_OK]
    finally:
        io.gated = False
        io.proceed.release()
        svc.stop()


def test_an_admin_flush_that_outlasts_the_timeout_raises(tmp_path):
    """A flush that does not finish within syncFlushTimeout is an error (FlushTimeout), never
    an answer that claims the log flushed."""
    io, svc, q, _, end1, a, ra = leader_in_its_flush(tmp_path)
    svc.timeout_ms = 50
    write(q, 100)
    with pytest.raises(FlushTimeout, match="not yet to"):
        svc.flush_now()
    io.proceed.release()
    a.join(10)
    assert ra == [PutStatus.PUT_OK] and q.flushed_where == end1


def test_the_store_hears_of_a_round_after_the_round_answered_its_puts(tmp_path):
    """The flushed offset reaches the store (checkpoint stamp, reput's wake-up) only once the
    round released its waiters and completed its completions: reput woken first would take the
    GIL ahead of the threads answering the puts the round made durable."""
    io = RecordingIO(str(tmp_path), gated=True)
    q = MappedFileQueue(str(tmp_path), PAGE * 16, io)
    heard: list[tuple[int, bool, list]] = []
    end1 = write(q, 100)
    svc = GroupCommitService(q, ManualClock(), FlushFailure(lambda e: None),
                             lambda offset, stamp: heard.append((offset, done.done, list(ra))),
                             lambda: 0, timeout_ms=5000)
    done = svc.submit(end1)  # an event loop's put: answered by whichever round covers it
    a, ra = waiting(svc, end1)  # a putter's: it leads the round
    io.step_one()
    a.join(10)
    assert ra == [PutStatus.PUT_OK] and done.value is PutStatus.PUT_OK
    assert heard == [(end1, True, [])]  # the completion was done; the leader's own wait returns after


def test_failed_flush_fails_the_leader_and_every_waiter_for_good(tmp_path):
    io, svc, q, errors, end1, a, ra = leader_in_its_flush(tmp_path)
    b, rb = waiting(svc, write(q, 100))
    until(lambda: svc.pending() == 1)
    io.fail("msync", EIO)
    io.proceed.release()
    a.join(10)
    b.join(10)
    assert ra == [PutStatus.FLUSH_DISK_FAILED] and rb == [PutStatus.FLUSH_DISK_FAILED]
    assert errors and errors[0].cause.errno == EIO and q.flushed_where == 0
    io.heal()
    io.gated = False
    assert svc.wait_flushed(end1, 1.0) is PutStatus.FLUSH_DISK_FAILED
    assert not svc.flush_now()
    assert io.calls["msync"] == 1 and io.synced == []  # never retried into a success


def test_a_follower_times_out_while_the_leader_is_stuck_in_its_flush(tmp_path):
    io, svc, q, _, _, a, ra = leader_in_its_flush(tmp_path)
    assert svc.wait_flushed(write(q, 100), 0.05) is PutStatus.FLUSH_DISK_TIMEOUT
    assert svc.pending() == 0
    io.proceed.release()
    a.join(10)
    assert ra == [PutStatus.PUT_OK]
    io.gated = False
    assert svc.wait_flushed(q.max_wrote_offset(), 5.0) is PutStatus.PUT_OK  # the next put leads


def test_a_waiter_past_the_end_of_the_log_does_not_pass_the_lead_round_and_round(tmp_path):
    io = RecordingIO(str(tmp_path))
    svc, q, _ = service(tmp_path, io)
    end = write(q, 100)
    assert svc.wait_flushed(end, 5.0) is PutStatus.PUT_OK
    assert svc.wait_flushed(end + 50, 0.05) is PutStatus.FLUSH_DISK_TIMEOUT
    assert io.calls["msync"] == 1  # nothing more to flush: no flush spun for it


def test_service_step_and_submit_share_the_leadership(tmp_path):
    io, svc, q, _, _, a, ra = leader_in_its_flush(tmp_path)
    done = svc.submit(write(q, 100))
    svc.step()  # a flush is in progress: the service thread does not flush beside it
    assert io.calls.get("msync", 0) == 0 and not done.done
    io.proceed.release()
    a.join(10)
    assert ra == [PutStatus.PUT_OK] and not done.done  # its bytes came after A's flush began
    threading.Thread(target=svc.step, daemon=True).start()
    io.step_one()
    assert done.wait(10) is PutStatus.PUT_OK and io.durable_end() >= q.max_wrote_offset()


@pytest.mark.parametrize("write_without_mmap", [False, True])
def test_no_put_is_answered_before_its_bytes_are_synced(tmp_path, write_without_mmap):
    """8 producer threads on a real SYNC_FLUSH store, small files so that groups cross file
    ends: every PUT_OK must find its end inside what the recorded msyncs / fdatasyncs had made
    durable when it was answered."""
    cfg = config(tmp_path, flush_disk_type="SYNC_FLUSH", write_without_mmap=write_without_mmap)
    io = (FdatasyncRecordingIO if write_without_mmap else RecordingIO)(cfg.commit_log_dir)
    s = MessageStore(cfg, io=io, clock=ManualClock())
    s.start()
    early: list[tuple[int, int]] = []
    failed: list = []

    def producer(k: int) -> None:
        for i in range(40):
            r = s.put_message(msg(k * 100 + i))
            if not r.ok:
                failed.append(r.status)
                continue
            durable = io.durable_end()
            if durable < r.end_offset:
                early.append((r.end_offset, durable))

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not failed and not early
        assert s.flushed_offset == s.max_phy_offset() == io.durable_end()
    finally:
        s.shutdown()


class FdatasyncRecordingIO(RecordingIO):
    """write_without_mmap: an fdatasync makes durable what was pwritten to that file before it."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        self._written: dict[str, int] = {}

    def pwrite(self, fd: int, data, offset: int, path: str) -> None:
        super().pwrite(fd, data, offset, path)
        with self._ranges_lock:
            self._written[path] = max(self._written.get(path, 0), offset + len(data))

    def fdatasync(self, fd: int, path: str) -> None:
        with self._ranges_lock:
            written = self._written.get(path, 0)
        super().fdatasync(fd, path)
        base = self.log_file_offset(path)
        if base is not None and written:
            with self._ranges_lock:
                self.synced.append((base, base + written))

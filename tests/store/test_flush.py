from __future__ import annotations

from common.clock import ManualClock
from store.codec import Message
from store.config import StoreConfig
from store.flush.flush import AsyncFlushService, CommitService, FlushFailure
from store.flush.group_commit import GroupCommitService
from store.commitlog.mapped_file_queue import MappedFileQueue
from store.message_store import MessageStore
from store.put_result import PutStatus
from tests.faults import EIO, FaultyFileIO

PAGE = 4096


def setup(tmp_path, mmap=True):
    io = FaultyFileIO()
    q = MappedFileQueue(str(tmp_path), PAGE * 16, io, write_through_mmap=mmap)
    clock = ManualClock()
    errors = []
    flushed = []
    failure = FlushFailure(errors.append)
    return io, q, clock, failure, errors, flushed


def write(q, n):
    f = q.get_last_file_for_write()
    f.append(b"x" * n)
    return f.file_from_offset + f.wrote_position


def group_commit(tmp_path, stamp: int = 0):
    """A GroupCommitService (5 s timeout) over a fresh queue; `flushed` records each offset."""
    io, q, clock, failure, errors, flushed = setup(tmp_path)
    svc = GroupCommitService(q, clock, failure, lambda o, s: flushed.append(o), lambda: stamp,
                             timeout_ms=5000)
    return svc, io, q, clock, errors, flushed


def test_group_commit_releases_waiters_at_their_offset(tmp_path):
    svc, io, q, clock, errors, flushed = group_commit(tmp_path, stamp=7)
    end1 = write(q, 100)
    w1 = svc.submit(end1)
    end2 = write(q, 100)
    w2 = svc.submit(end2)
    assert not w1.done and not w2.done
    svc.step()
    assert w1.value is PutStatus.PUT_OK and w2.value is PutStatus.PUT_OK
    assert q.flushed_where == end2 and flushed == [end2]
    assert io.calls["msync"] == 1  # one flush for both waiters
    assert svc.submit(end1).value is PutStatus.PUT_OK  # already durable: immediate


def test_group_commit_times_out_with_flush_disk_timeout(tmp_path):
    svc, io, q, clock, errors, flushed = group_commit(tmp_path)
    end = write(q, 100)
    w = svc.submit(end + 50)  # beyond what exists: cannot be satisfied yet
    svc.step()
    assert not w.done
    clock.advance(5.0)
    svc.step()
    assert w.value is PutStatus.FLUSH_DISK_TIMEOUT


def test_failed_flush_fails_waiters_and_is_never_retried(tmp_path):
    svc, io, q, clock, errors, flushed = group_commit(tmp_path)
    end = write(q, 100)
    w = svc.submit(end)
    io.fail("msync", EIO, times=1)
    svc.step()
    assert w.value is PutStatus.FLUSH_DISK_FAILED
    assert errors and errors[0].cause.errno == EIO
    assert q.flushed_where == 0
    # the disk "recovers": still no success for data that may already be lost
    w2 = svc.submit(end)
    svc.step()
    assert w2.value is PutStatus.FLUSH_DISK_FAILED
    assert q.flushed_where == 0 and flushed == []


def test_async_flush_least_pages_and_thorough_interval(tmp_path):
    io, q, clock, failure, errors, flushed = setup(tmp_path)
    svc = AsyncFlushService(q, clock, failure, lambda o, s: flushed.append((o, s)), lambda: 42,
                            interval_ms=500, least_pages=4, thorough_interval_ms=10_000)
    write(q, 100)
    svc.step()
    assert q.flushed_where == 0  # fewer than 4 dirty pages
    end = write(q, PAGE * 4)
    svc.step()
    assert q.flushed_where == end and flushed == [(end, 42)]
    end = write(q, 10)
    svc.step()
    assert q.flushed_where < end
    clock.advance(10)
    svc.step()
    assert q.flushed_where == end


def test_async_flush_is_due_exactly_when_a_round_would_flush(tmp_path):
    """A put wakes the async flusher only when due() says a round would write something
    (MessageStore.append): check due() against what a round then does, across the least
    pages, the thorough interval and a file that filled up."""
    io, q, clock, failure, errors, flushed = setup(tmp_path)
    svc = AsyncFlushService(q, clock, failure, lambda o, s: None, lambda: 0,
                            interval_ms=500, least_pages=4, thorough_interval_ms=10_000)

    def due_then_step() -> bool:
        due, before = svc.due(q.max_wrote_offset()), q.flushed_where
        svc.step()
        assert due == (q.flushed_where > before), (due, before, q.flushed_where)
        return due

    write(q, 100)
    assert not due_then_step()  # under 4 dirty pages
    write(q, PAGE * 3)
    assert not due_then_step()  # 3 pages and a bit: still under 4
    write(q, PAGE)
    assert due_then_step()
    write(q, 10)
    assert not due_then_step()
    clock.advance(10)
    assert due_then_step()  # the thorough round flushes any amount
    assert not due_then_step()  # nothing left
    last = q.get_last_file_for_write()
    write(q, q.file_size - PAGE * 2 - last.wrote_position)
    q.flush(0)
    write(q, PAGE * 2)  # the file is full with 2 pages unflushed: flushed whole
    assert last.is_full and q.max_wrote_offset() == last.file_from_offset + q.file_size
    assert due_then_step()


def test_a_put_wakes_the_async_flusher_only_when_a_flush_is_due(tmp_path, monkeypatch):
    store = MessageStore(StoreConfig(store_path_root_dir=str(tmp_path / "store"),
                                     mapped_file_size_commit_log=PAGE * 64))
    store.start()
    try:
        wakes: list[int] = []
        wakeup = store.flusher.wakeup
        monkeypatch.setattr(store.flusher, "wakeup", lambda: (wakes.append(1), wakeup()))
        flushed = store.commitlog.flushed_where
        for i in range(10):  # about 1 KiB together: no round would flush it yet
            assert store.put_message(Message("T", b"m%d" % i)).ok
        assert wakes == [] and store.commitlog.flushed_where == flushed
        assert store.put_message(Message("T", b"x" * (PAGE * 5))).ok
        assert wakes == [1]
    finally:
        store.shutdown()


def test_commit_service_moves_buffered_bytes_then_flush(tmp_path):
    io, q, clock, failure, errors, flushed = setup(tmp_path, mmap=False)
    flusher = AsyncFlushService(q, clock, failure, lambda o, s: None, lambda: 0,
                                interval_ms=500, least_pages=0, thorough_interval_ms=10_000)
    committer = CommitService(q, clock, failure, flusher, interval_ms=200, least_pages=4,
                              thorough_interval_ms=200)
    end = write(q, PAGE * 5)
    assert q.max_offset() == 0  # not yet visible to readers
    committer.step()
    assert q.committed_where == end and q.max_offset() == end
    flusher.step()
    assert q.flushed_where == end
    io.fail("pwrite", EIO)
    write(q, PAGE * 5)
    clock.advance(1)
    committer.step()
    assert failure.failed and errors


def test_checkpoint_stamp_only_when_the_flush_covered_the_newest_record(tmp_path):
    io, q, clock, failure, errors, flushed = setup(tmp_path)
    svc = AsyncFlushService(q, clock, failure, lambda o, s: flushed.append((o, s)), lambda: 99,
                            interval_ms=500, least_pages=4, thorough_interval_ms=10_000)
    write(q, PAGE * 16)  # fills the first file exactly
    write(q, 10)  # a few bytes in the next file: under least pages, not flushed
    svc.step()
    assert q.flushed_where == PAGE * 16
    assert flushed == [(PAGE * 16, 0)]  # no stamp: the newest record is not on disk

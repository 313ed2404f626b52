"""The facade end to end with real files: put/get/query, restarts, disk faults, bad input."""
from __future__ import annotations

import asyncio
import os

import pytest

from common import failpoints
from store import running_flags as rf
from common.clock import ManualClock
from common.service import PeriodicTask
from store.codec import Message
from store.errors import StoreLocked
from store.get_result import GetStatus
from store.layout import ABORT_FILE
from store.message_store import MessageStore
from store.put_result import PutStatus
from tests.faults import EIO, ENOSPC, EROFS, FaultyFileIO
from tests.support.small_store import config, msg, opened


@pytest.fixture
def clock():
    return ManualClock()


def test_put_get_query_and_restart(tmp_path, clock):
    s = opened(tmp_path, clock)
    results = [s.put_message(msg(i)) for i in range(200)]
    assert all(r.ok for r in results)
    s.reput.catch_up()
    got = s.get_messages("Orders", 1, 0, 32, "TagA")
    assert got.status is GetStatus.FOUND
    assert [m.queue_offset for m in got.messages] == list(range(32))
    assert all(m.tags == "TagA" for m in got.messages)
    assert s.get_messages("Orders", 0, 0, 10, "TagA").status is GetStatus.NO_MATCHED_MESSAGE
    assert s.get_messages("Orders", 1, 50, 10).status is GetStatus.OFFSET_OVERFLOW_ONE
    assert s.get_messages("Orders", 1, 60, 10).status is GetStatus.OFFSET_OVERFLOW_BADLY
    assert s.get_messages("Nope", 1, 0, 10).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    found = s.query_messages("Orders", "order-77")
    assert [m.body[:6] for m in found] == [b"m00077"]
    assert len(s.query_messages("Orders", "shared", max_num=500)) == 200
    assert s.look_message_by_id(results[9].append.msg_id).body[:6] == b"m00009"
    unique = s.query_messages("Orders", "UNIQ" + "0" * 25 + "123")
    assert [m.uniq_key for m in unique] == ["UNIQ" + "0" * 25 + "123"]
    s.shutdown()
    assert not os.path.exists(tmp_path / ABORT_FILE)

    s = opened(tmp_path, clock)
    assert s.recovery_report is not None and not s.recovery_report.abnormal
    r = s.put_message(msg(200, qid=1))
    assert r.ok and r.append.queue_offset == 50
    s.reput.catch_up()
    assert s.max_offset_in_queue("Orders", 1) == 51
    s.shutdown()


def test_offset_for_timestamp(tmp_path, clock):
    s = opened(tmp_path, clock)
    stamps = []
    for i in range(20):
        clock.advance(1)
        stamps.append(s.put_message(msg(i, qid=0)).append.store_timestamp)
    s.reput.catch_up()
    assert s.offset_for_timestamp("Orders", 0, stamps[7]) == 7
    assert s.offset_for_timestamp("Orders", 0, stamps[7] - 500) == 7
    assert s.offset_for_timestamp("Orders", 0, stamps[-1] + 10_000) == 20
    s.shutdown()


def test_second_store_on_same_directory_is_refused(tmp_path, clock):
    s = opened(tmp_path, clock)
    with pytest.raises(StoreLocked):
        MessageStore(config(tmp_path), clock=clock).load()
    s.shutdown()


@pytest.mark.parametrize("bad,status,field", [
    (Message("bad topic!", b"x"), PutStatus.MESSAGE_ILLEGAL, "topic"),
    (Message("T" * 128, b"x"), PutStatus.MESSAGE_ILLEGAL, "topic"),
    (Message("SCHEDULE_TOPIC_XXXX", b"x"), PutStatus.MESSAGE_ILLEGAL, "reserved"),
    (Message("RMQ_SYS_TRANS_HALF_TOPIC", b"x"), PutStatus.MESSAGE_ILLEGAL, "reserved"),
    (Message("T", b"x" * (4 * 1024 * 1024 + 1)), PutStatus.MESSAGE_ILLEGAL, "body"),
    (Message("T", b"x", properties={"k": "v" * 32767}), PutStatus.PROPERTIES_SIZE_EXCEEDED, "properties"),
    (Message("T", b"x", properties={"TAGS": "a|b"}), PutStatus.MESSAGE_ILLEGAL, "tag"),
    (Message("T", b"x", properties={"k\x01": "v"}), PutStatus.MESSAGE_ILLEGAL, "separator"),
])
def test_bad_input_is_refused_and_writes_nothing(tmp_path, clock, bad, status, field):
    s = opened(tmp_path, clock, mapped_file_size_commit_log=8 * 1024 * 1024)
    s.put_message(msg(0))
    before = s.max_phy_offset()
    res = s.put_messages([msg(1), bad])  # a bad message spoils its whole batch
    assert res.status is status and field in res.reason
    assert s.max_phy_offset() == before
    assert s.put_message(msg(2)).append.queue_offset == 0  # queue offsets untouched (queue 2)
    s.shutdown()


def test_eio_on_sync_flush_is_never_ok_and_sticky_until_restart(tmp_path, clock):
    io = FaultyFileIO()
    s = opened(tmp_path, clock, io=io, flush_disk_type="SYNC_FLUSH")
    assert s.put_message(msg(0)).ok
    io.fail("msync", EIO)
    res = s.put_message(msg(1))
    assert res.status is PutStatus.FLUSH_DISK_FAILED and "msync" in res.reason
    assert not s.writable and "DISK_ERROR" in s.not_writable_reason
    io.heal()  # the disk answers again; the store must not trust it
    res = s.put_message(msg(2))
    assert res.status is PutStatus.SERVICE_NOT_AVAILABLE and "msync" in res.reason
    assert not s.writable
    s.shutdown()
    assert os.path.exists(tmp_path / ABORT_FILE)  # unclean: the next start recovers abnormally
    s = MessageStore(config(tmp_path, flush_disk_type="SYNC_FLUSH"), io=io, clock=clock)
    s.start()
    assert s.recovery_report.abnormal and s.writable
    assert s.put_message(msg(3)).ok
    s.shutdown()


def test_read_only_failpoint_fails_the_flush_for_good(tmp_path, clock):
    """The drill's switch (fileio.write=fail_while) reaches the store through its plain FileIO
    path: the put whose flush meets EROFS is refused, and removing the trigger brings nothing
    back, since a later flush could report success for pages the kernel dropped."""
    trigger = tmp_path / "readonly"
    failpoints.configure(f"fileio.write=fail_while:{trigger}")
    try:
        # The logics flush (its checkpoint write) would meet EROFS too: not during this test.
        s = opened(tmp_path / "store", clock, flush_disk_type="SYNC_FLUSH",
                   flush_interval_consume_queue=600_000)
        assert s.put_message(msg(0, qid=0)).ok
        s.reput.catch_up()  # its queue and index files exist: reput cannot meet EROFS first
        flushed = s.flushed_offset
        trigger.touch()
        res = s.put_message(msg(1, qid=0))
        assert res.status is PutStatus.FLUSH_DISK_FAILED, (res.status, res.reason)
        assert "Read-only file system (failpoint fileio.write)" in res.reason
        assert not s.writable and "DISK_ERROR" in s.not_writable_reason
        trigger.unlink()
        assert not s.flusher.flush_now() and s.flushed_offset == flushed
        res = s.put_message(msg(2, qid=0))
        assert res.status is PutStatus.SERVICE_NOT_AVAILABLE and "Read-only" in res.reason
        s.shutdown()
    finally:
        failpoints.configure("")


@pytest.mark.parametrize("on_loop", [False, True], ids=["thread", "event-loop"])
def test_a_sync_flush_put_waits_for_its_flush_in_a_thread_or_on_an_event_loop(tmp_path, clock,
                                                                              on_loop):
    """flush_wait decides once what an append waits for; a thread waits for it (joining the
    group commit), an event loop awaits it (the service thread flushes): the same answers."""
    io = FaultyFileIO()
    s = opened(tmp_path, clock, io=io, flush_disk_type="SYNC_FLUSH")

    async def awaited(flush):
        return await flush

    def answer(msgs: list[Message]):
        result = s.append(msgs)
        flush = s.flush_wait(msgs, result)
        return result, asyncio.run(awaited(flush)) if on_loop else flush.wait()

    try:
        appended, put = answer([msg(0)])
        assert put.ok and put.appends == appended.appends
        assert s.flushed_offset >= appended.end_offset
        io.fail("msync", EIO)
        _, put = answer([msg(1)])
        assert put.status is PutStatus.FLUSH_DISK_FAILED and "msync" in put.reason
        assert s.stats.put_failures == 1 and not s.writable
    finally:
        s.shutdown()


def test_flush_wait_is_none_when_the_append_is_already_the_answer(tmp_path, clock):
    s = opened(tmp_path / "sync", clock, flush_disk_type="SYNC_FLUSH")
    no_wait = msg(0)
    no_wait.properties["WAIT"] = "false"
    assert s.flush_wait([no_wait], s.append([no_wait])) is None
    refused = s.append([msg(1, topic="")])
    assert refused.status is PutStatus.MESSAGE_ILLEGAL and s.flush_wait([msg(1)], refused) is None
    assert s.flush_wait([msg(2)], s.append([msg(2)])) is not None  # the check above can fail
    s.shutdown()
    s = opened(tmp_path / "async", clock)
    assert s.flush_wait([msg(3)], s.append([msg(3)])) is None  # ASYNC_FLUSH
    s.shutdown()


def test_an_attached_archive_shipper_runs_with_the_store_and_answers_retention(tmp_path, clock):
    s = MessageStore(config(tmp_path), clock=clock)
    shipper = PeriodicTask("archive-shipper", lambda: None, 60.0)
    s.attach_archive(shipper, lambda: 7, lambda: 3)
    s.start()
    assert shipper.running and s.retention is not None and s.retention.running
    assert (s.archived_up_to(), s.archive_held_up_to()) == (7, 3)
    s.shutdown()
    assert not shipper.running


def test_dispatch_listeners_see_each_batch_until_they_unsubscribe(tmp_path, clock):
    s = opened(tmp_path, clock)
    seen: list[int] = []
    unsubscribe = s.on_dispatch(lambda batch: seen.extend(r.commit_log_offset for r in batch))
    first = s.put_messages([msg(0), msg(1)])
    s.reput.catch_up()
    assert seen == [a.wrote_offset for a in first.appends]
    assert s.dispatched_offset == first.end_offset
    unsubscribe()
    unsubscribe()  # idempotent
    s.put_message(msg(2))
    s.reput.catch_up()
    assert len(seen) == 2 and s.dispatched_offset == s.max_phy_offset()
    s.shutdown()


def test_eio_under_async_flush_turns_store_not_writable(tmp_path, clock):
    io = FaultyFileIO()
    s = opened(tmp_path, clock, io)
    assert s.put_message(msg(0)).ok
    io.fail("msync", EIO)
    s.flusher.step() if not s.flusher.running else None
    s.flusher.stop()  # its final flush fails too
    assert not s.writable
    assert s.put_message(msg(1)).status is PutStatus.SERVICE_NOT_AVAILABLE
    s.shutdown()


def test_enospc_refuses_new_file_then_resumes_without_restart(tmp_path, clock):
    io = FaultyFileIO()
    s = opened(tmp_path, clock, io)
    io.fail("preallocate", ENOSPC)
    statuses = set()
    for i in range(200):
        statuses.add(s.put_message(msg(i, qid=0)).status)
    assert PutStatus.CREATE_MAPPED_FILE_FAILED in statuses
    stored_before = s.max_offset_in_queue("Orders", 0)
    io.heal()
    res = s.put_message(msg(999, qid=0))
    assert res.ok  # space is back: no restart needed
    s.reput.catch_up()
    # every acknowledged message is readable, queue offsets stay contiguous
    got = [m for o in range(0, 300, 32) for m in s.get_messages("Orders", 0, o, 32).messages]
    assert [m.queue_offset for m in got] == list(range(len(got)))
    assert s.max_offset_in_queue("Orders", 0) >= stored_before + 1
    s.shutdown()


def test_read_only_directory_refuses_cleanly_and_restart_recovers(tmp_path, clock):
    io = FaultyFileIO()
    s = opened(tmp_path, clock, io=io, flush_disk_type="SYNC_FLUSH")
    assert s.put_message(msg(0)).ok
    s.reput.catch_up()  # the index file exists before "open" fails (else reput fails first)
    io.fail("msync", EROFS)
    io.fail("preallocate", EROFS)
    io.fail("open", EROFS)
    res = s.put_messages([msg(i, qid=0) for i in range(100)])
    assert res.status is PutStatus.CREATE_MAPPED_FILE_FAILED  # refused before writing
    res = s.put_message(msg(1, qid=0))  # fits the current file; its flush fails
    assert res.status is PutStatus.FLUSH_DISK_FAILED
    assert not s.writable and "Read-only" in s.not_writable_reason
    s.shutdown()
    io.heal()
    s = MessageStore(config(tmp_path, flush_disk_type="SYNC_FLUSH"), io=io, clock=clock)
    s.start()
    assert s.writable
    s.reput.catch_up()
    assert s.get_messages("Orders", 0, 0, 10).messages[0].body[:6] == b"m00000"
    s.shutdown()


def test_disk_full_flag_is_transient(tmp_path, clock):
    s = opened(tmp_path, clock)
    s.flags.set(rf.DISK_FULL, "disk usage 0.95")
    assert s.put_message(msg(0)).status is PutStatus.SERVICE_NOT_AVAILABLE
    s.flags.clear(rf.DISK_FULL)
    assert s.put_message(msg(0)).ok
    s.shutdown()


def test_delay_message_goes_through_the_schedule_topic(tmp_path, clock):
    s = opened(tmp_path, clock)
    m = msg(1, qid=2)
    m.properties["DELAY"] = "1"  # 1 s
    r = s.put_message(m)
    assert r.ok
    s.reput.catch_up()
    assert s.max_offset_in_queue("Orders", 2) == 0
    assert s.max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 0) == 1
    svc = s.schedule
    clock.advance(1.5)
    svc.step()
    s.reput.catch_up()
    got = s.get_messages("Orders", 2, 0, 10).messages
    assert [g.body for g in got] == [m.body] and "DELAY" not in got[0].properties
    s.shutdown()

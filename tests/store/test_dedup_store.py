"""The duplicate window in a MessageStore (store/dedup/): a repeated client send is not written
again, concurrent sends of one id write one record, the window is rebuilt from the commitlog
when the store opens, a slave's window is filled by reput (so a promoted slave answers a retry
of its old master's send), delayed messages' deliveries are not repeats, and a cut forgets."""
from __future__ import annotations

import dataclasses
import threading

import pytest

from common.clock import ManualClock
from store import codec
from store.codec import Message, SysFlag
from store.codec.dispatch import SCHEDULE_TOPIC
from store.message_store import MessageStore
from store.put_result import OriginalAppend, PutStatus
from store.schedule.schedule import ScheduleService
from tests.support.small_store import config, loaded, replicate

NOW = 1_700_000_000_000


def msg(message_id: str, body: bytes = b"body", topic: str = "Orders", **props) -> Message:
    p = {codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: message_id, "TAGS": "T", **props}
    return Message(topic, body, 1, p, born_timestamp=NOW)


def stored(store: MessageStore, topic: str = "Orders", queue_id: int = 1) -> list:
    """Every message of the queue, once reput dispatched all."""
    store.reput.catch_up()
    out: list = []
    while True:
        got = store.get_messages(topic, queue_id, len(out), 64).messages
        if not got:
            return out
        out += got


def places(result) -> list[tuple[int, int]]:
    return [(a.wrote_offset, a.queue_offset) for a in result.appends]


@pytest.fixture
def store(tmp_path):
    """A loaded store on a ManualClock (`store.clock`)."""
    s = loaded(tmp_path, ManualClock(NOW))
    yield s
    s.shutdown()


def test_a_repeated_send_is_answered_with_the_original_and_not_written(store):
    clock = store.clock
    first = store.append([msg("A"), msg("B")], dedup=True)
    assert first.ok and first.repeated == 0
    clock.advance(3)
    again = store.append([msg("A"), msg("B")], dedup=True)
    assert again.ok and again.repeated == 2
    assert all(isinstance(a, OriginalAppend) for a in again.appends)
    assert places(again) == places(first) and again.end_offset == first.end_offset
    assert store.max_phy_offset() == first.end_offset  # nothing written
    assert [m.uniq_key for m in stored(store)] == ["A", "B"]
    assert store.stats.put_messages == 2
    # without dedup (not a client's send), the store writes what it is given
    assert store.append([msg("A")]).repeated == 0 and len(stored(store)) == 3


def test_a_mixed_batch_writes_the_new_and_answers_the_repeat(store):
    a = store.append([msg("A")], dedup=True)
    mixed = store.append([msg("B"), msg("A"), msg("C")], dedup=True)
    assert mixed.ok and mixed.repeated == 1
    assert places(mixed)[1] == places(a)[0]
    assert [m.uniq_key for m in stored(store)] == ["A", "B", "C"]
    assert mixed.end_offset == store.max_phy_offset()


def test_a_reused_id_is_refused_and_nothing_is_written(store):
    store.append([msg("A", b"one")], dedup=True)
    end = store.max_phy_offset()
    refused = store.append([msg("B"), msg("A", b"two")], dedup=True)
    assert refused.status is PutStatus.MESSAGE_ILLEGAL
    assert refused.reason.startswith("illegal message id: A was stored with another body")
    assert store.max_phy_offset() == end


def test_two_concurrent_sends_of_one_id_write_one_record(store):
    ids = [f"ID{i}" for i in range(200)]
    start = threading.Barrier(4)
    results = []

    def producer():
        start.wait()
        results.extend(store.append([msg(i)], dedup=True) for i in ids)

    threads = [threading.Thread(target=producer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 * len(ids) and all(r.ok for r in results)
    assert sum(r.repeated for r in results) == 3 * len(ids)
    assert sorted(m.uniq_key for m in stored(store)) == sorted(ids)
    by_id = {}
    for r in results:  # every answer of an id names the one record
        by_id.setdefault(r.appends[0].wrote_offset, set()).add(r.appends[0].queue_offset)
    assert len(by_id) == len(ids)


def test_the_window_is_rebuilt_when_the_store_opens(tmp_path):
    clock = ManualClock(NOW)
    s = loaded(tmp_path, clock)
    old = s.append([msg(f"old{i}") for i in range(20)], dedup=True)
    clock.advance(100)
    recent = s.append([msg(f"new{i}") for i in range(20)], dedup=True)
    s.append([Message("rmq_sys_CONSUMER_STATE", b"x", 0, {})], allow_system_topic=True)
    s.reput.catch_up()
    s.shutdown()
    clock.advance(30)  # old* are 130 s old now, new* 30 s
    s = loaded(tmp_path, clock)
    try:
        rebuilt = s.duplicates_rebuilt
        assert rebuilt.start == recent.appends[0].wrote_offset  # found by the queues' times
        assert rebuilt.end == s.max_phy_offset() and rebuilt.entries == 20
        assert s.duplicates.get("old0") is None
        again = s.append([msg("new7")], dedup=True)
        assert again.repeated == 1 and places(again) == [places(recent)[7]]
        assert s.append([msg("old3")], dedup=True).repeated == 0  # out of the window
        assert old.ok
    finally:
        s.shutdown()


def test_a_busy_windows_rebuild_walks_about_as_many_sends_as_it_keeps(tmp_path):
    """With duplicateWindowMaxEntries below what the last window holds, the walk starts where
    the queues list about that many sends (a search over time), not at now - window."""
    clock = ManualClock(NOW)
    s = loaded(tmp_path, clock, duplicate_window_max_entries=30)
    for i in range(10):
        s.append([msg(f"b{i}-{j}") for j in range(10)], dedup=True)
        clock.advance(1)
    s.reput.catch_up()
    s.shutdown()
    s = loaded(tmp_path, clock, duplicate_window_max_entries=30)
    try:
        rebuilt = s.duplicates_rebuilt
        assert rebuilt.records == 30 and rebuilt.entries == 30  # the last three puts
        assert s.duplicates.get("b7-0") is not None and s.duplicates.get("b6-9") is None
    finally:
        s.shutdown()


def test_a_window_of_records_reput_has_not_dispatched_is_rebuilt_too(tmp_path):
    """A slave restarts with records past its confirm offset (not in its queues yet)."""
    clock = ManualClock(NOW)
    s = loaded(tmp_path, clock)
    s.confirm_offset = 0  # nothing confirmed: reput dispatches nothing
    s.append([msg(f"id{i}") for i in range(5)], dedup=True)
    s.shutdown()
    s = MessageStore(config(tmp_path), clock=clock)  # a restarted slave: nothing confirmed
    s.confirm_offset = 0
    s.load()
    try:
        assert s.dispatched_offset == 0
        assert all(s.duplicates.get(f"id{i}") is not None for i in range(5))
    finally:
        s.shutdown()


def test_a_slaves_window_is_filled_by_reput_and_answers_once_promoted(tmp_path):
    clock = ManualClock(NOW)
    master = loaded(tmp_path / "master", clock)
    slave = loaded(tmp_path / "slave", clock, broker_role="SLAVE")
    try:
        sent = master.append([msg("A"), msg("B")], dedup=True)
        replicate(master, slave)
        assert slave.duplicates.get("B").commit_log_offset == sent.appends[1].wrote_offset
        slave.reconfigure(dataclasses.replace(slave.config, broker_role="ASYNC_MASTER"))
        slave.prepare_for_writes()
        again = slave.append([msg("A"), msg("B")], dedup=True)
        assert again.repeated == 2 and places(again) == places(sent)
        assert slave.max_phy_offset() == master.max_phy_offset()
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_cut_forgets_the_ids_past_it(store):
    a = store.append([msg("A")], dedup=True)
    store.append([msg("B")], dedup=True)
    store.truncate(a.end_offset)
    assert store.duplicates.get("B") is None
    assert store.append([msg("B")], dedup=True).repeated == 0


def test_a_delayed_messages_delivery_is_not_a_repeat(store):
    clock = store.clock
    delayed = msg("D", b"later", DELAY="1")  # level 1: 1 s
    sent = store.append([delayed], dedup=True)
    assert sent.ok and stored(store, SCHEDULE_TOPIC, 0)
    retry = store.append([msg("D", b"later", DELAY="1")], dedup=True)
    assert retry.repeated == 1 and places(retry) == places(sent)
    service = ScheduleService(store, clock)
    clock.advance(1.5)
    store.reput.catch_up()
    service.step()
    got = stored(store)
    assert [(m.uniq_key, m.body) for m in got] == [("D", b"later")]  # delivered, once
    # a retry after the delivery still names the send (the schedule copy), not the delivery
    late = store.append([msg("D", b"later", DELAY="1")], dedup=True)
    assert late.repeated == 1 and places(late) == places(sent)


def test_a_half_and_its_commit(store):
    """The commit record carries its half's id (and the real topic): it is no send, and a
    retried half-send is still the half's repeat."""
    half = msg("H", REAL_TOPIC="Orders", REAL_QID="1", TRAN_MSG="true")
    half.topic, half.queue_id = "RMQ_SYS_TRANS_HALF_TOPIC", 0
    sent = store.append([half], allow_system_topic=True, dedup=True)
    committed = msg("H")
    committed.sys_flag = SysFlag.TRANSACTION_COMMIT_TYPE
    assert store.append([committed]).ok  # what EndTransaction appends
    again = store.append([dataclasses.replace(half)], allow_system_topic=True, dedup=True)
    assert again.repeated == 1 and places(again) == places(sent)
    assert [m.uniq_key for m in stored(store)] == ["H"]  # the committed message


def test_zero_seconds_stores_every_send(tmp_path):
    clock = ManualClock(NOW)
    s = loaded(tmp_path, clock, duplicate_window_seconds=0)
    try:
        for _ in range(3):
            assert s.append([msg("A")], dedup=True).repeated == 0
        assert len(stored(s)) == 3 and len(s.duplicates) == 0
    finally:
        s.shutdown()

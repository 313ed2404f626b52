"""Delay-level and deliver-at messages (store/schedule/schedule_rewrite.py, store/schedule/schedule.py), stepped by hand with a ManualClock."""
from __future__ import annotations

import collections
import dataclasses
import json

import pytest

from store import codec
from store import running_flags as rf
from common.clock import ManualClock
from store.codec import Message, SysFlag
from store.config import StoreConfig
from store.codec.dispatch import SCHEDULE_TOPIC
from store.errors import MessageIllegal
from store.message_store import MessageStore
from store.put_result import PutStatus
from store.layout import StoreLayout
from store.schedule.schedule import PROGRESS_TOPIC, ScheduleService, attach
from store.schedule.schedule_rewrite import put_scheduled, rebuild_real_message, to_schedule
from tests.support.small_store import loaded, replicate

LEVELS = StoreConfig(store_path_root_dir="/tmp/x").delay_levels_ms()
NOW = 1_700_000_000_000
MAX_DELAY = 3 * 24 * 3600


def open_store(tmp_path, clock, **kw) -> MessageStore:
    """Loaded and writable, the services stepped by the tests, in 64 KiB commitlog files."""
    return loaded(tmp_path, clock, **{"mapped_file_size_commit_log": 64 * 1024,
                                      "mapped_file_size_consume_queue": 20 * 100, **kw})


def msg(name: str, topic="Orders", qid=3, **props) -> Message:
    p = {"TAGS": "TagA", "KEYS": f"{name} shared", "UNIQ_KEY": f"UNIQ-{name}", "custom": "x"}
    p.update({k: str(v) for k, v in props.items()})
    return Message(topic, f"body-{name}".encode(), qid, p, flag=7, born_timestamp=NOW - 1000,
                   born_host="10.0.0.1:5555", reconsume_times=2)


def real(store, topic="Orders", qid=3) -> list:
    store.reput.catch_up()
    out, offset = [], 0
    while True:
        got = store.get_messages(topic, qid, offset, 64)
        if not got.messages:
            return out
        out += got.messages
        offset = got.next_begin_offset


def bodies(store, topic="Orders", qid=3) -> list[bytes]:
    return [m.body for m in real(store, topic, qid)]


def tick(store, service, seconds=0.0) -> None:
    store.clock.advance(seconds)
    store.reput.catch_up()
    service.step()
    store.reput.catch_up()


@pytest.fixture
def clock():
    return ManualClock(NOW)


@pytest.fixture
def store(tmp_path, clock):
    s = open_store(tmp_path, clock)
    yield s
    s.shutdown()


# -- to_schedule --------------------------------------------------------------------------------
def test_to_schedule_delay_level():
    m = msg("a", DELAY=2, TIMER_DELIVER_MS=NOW + 99_000)
    out = to_schedule(m, LEVELS, NOW, MAX_DELAY)
    assert (out.topic, out.queue_id) == (SCHEDULE_TOPIC, 1)
    assert out.properties["REAL_TOPIC"] == "Orders" and out.properties["REAL_QID"] == "3"
    assert out.properties["DELAY"] == "2"
    assert "TIMER_DELIVER_MS" not in out.properties  # a delay level wins over a timer
    assert out.body == m.body and out.flag == 7 and out.reconsume_times == 2
    assert m.topic == "Orders" and "REAL_TOPIC" not in m.properties  # input untouched


def test_to_schedule_clamps_level_and_ignores_others():
    out = to_schedule(msg("a", DELAY=30), LEVELS, NOW, MAX_DELAY)
    assert out.queue_id == 17 and out.properties["DELAY"] == "18"
    plain = msg("b")
    assert to_schedule(plain, LEVELS, NOW, MAX_DELAY) is plain
    zero = msg("c", DELAY=0)
    assert to_schedule(zero, LEVELS, NOW, MAX_DELAY) is zero
    for tran in (SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE):
        prepared = msg("d", DELAY=3)
        prepared.sys_flag = tran
        assert to_schedule(prepared, LEVELS, NOW, MAX_DELAY) is prepared
    committed = msg("e", DELAY=3)
    committed.sys_flag = SysFlag.TRANSACTION_COMMIT_TYPE
    assert to_schedule(committed, LEVELS, NOW, MAX_DELAY).topic == SCHEDULE_TOPIC
    with pytest.raises(MessageIllegal):
        to_schedule(msg("f", DELAY="soon"), LEVELS, NOW, MAX_DELAY)


def test_to_schedule_timestamps():
    out = to_schedule(msg("a", TIMER_DELIVER_MS=NOW + 7000), LEVELS, NOW, MAX_DELAY)
    assert (out.topic, out.queue_id) == (SCHEDULE_TOPIC, len(LEVELS))
    assert out.properties["TIMER_DELIVER_MS"] == str(NOW + 7000)
    rel = to_schedule(msg("b", TIMER_DELAY_SEC=30), LEVELS, NOW, MAX_DELAY)
    assert rel.properties["TIMER_DELIVER_MS"] == str(NOW + 30_000)
    assert "TIMER_DELAY_SEC" not in rel.properties
    rel_ms = to_schedule(msg("c", TIMER_DELAY_MS=1500), LEVELS, NOW, MAX_DELAY)
    assert rel_ms.properties["TIMER_DELIVER_MS"] == str(NOW + 1500)
    past = msg("d", TIMER_DELIVER_MS=NOW - 1)
    assert to_schedule(past, LEVELS, NOW, MAX_DELAY) is past
    assert to_schedule(msg("e", TIMER_DELIVER_MS=NOW + MAX_DELAY * 1000), LEVELS, NOW,
                       MAX_DELAY).topic == SCHEDULE_TOPIC
    with pytest.raises(MessageIllegal) as e:
        to_schedule(msg("f", TIMER_DELIVER_MS=NOW + MAX_DELAY * 1000 + 1), LEVELS, NOW, MAX_DELAY)
    assert e.value.field == "delivery time"
    with pytest.raises(MessageIllegal):
        to_schedule(msg("g", TIMER_DELIVER_MS="tomorrow"), LEVELS, NOW, MAX_DELAY)


def test_rebuild_real_message_requires_real_topic():
    rec = codec.decode(codec.encode(msg("a", DELAY=1)).data)
    with pytest.raises(MessageIllegal):
        rebuild_real_message(rec)


# -- delivery --------------------------------------------------------------------------------
def test_delay_level_2_delivered_after_5s(store, clock):
    original = msg("a", DELAY=2)
    r = put_scheduled(store, [original])
    assert r.ok
    store_ts = r.append.store_timestamp
    store.reput.catch_up()
    sched = store.get_messages(SCHEDULE_TOPIC, 1, 0).messages
    assert len(sched) == 1
    assert sched[0].properties["REAL_TOPIC"] == "Orders" and sched[0].properties["REAL_QID"] == "3"
    units = list(store.cq_store.find(SCHEDULE_TOPIC, 1).iter_units(0, 10))
    assert units[0][3] == store_ts + 5000
    assert store.max_offset_in_queue("Orders", 3) == 0

    svc = ScheduleService(store, clock)
    tick(store, svc)
    tick(store, svc, 4.9)
    assert real(store) == []
    assert svc.delivery_lag_ms() == 0
    tick(store, svc, 0.2)
    got = real(store)
    assert len(got) == 1
    m = got[0]
    assert m.body == original.body and m.tags == "TagA" and m.keys == ["a", "shared"]
    assert m.uniq_key == "UNIQ-a" and m.properties["custom"] == "x"
    for gone in ("DELAY", "REAL_TOPIC", "REAL_QID", "TIMER_DELIVER_MS"):
        assert gone not in m.properties
    assert (m.flag, m.born_timestamp, m.born_host, m.reconsume_times) == \
        (7, NOW - 1000, "10.0.0.1:5555", 2)
    assert [x.body for x in store.query_messages("Orders", "UNIQ-a")] == [original.body]
    assert svc.offset_table() == {2: 1}
    assert svc.stats.delivered == 1
    tick(store, svc, 10)
    assert len(real(store)) == 1  # delivered once


def test_level_18_and_clamped_level(store, clock):
    assert put_scheduled(store, [msg("a", DELAY=18), msg("b", DELAY=30)]).ok
    svc = ScheduleService(store, clock)
    tick(store, svc, 2 * 3600 - 1)
    assert real(store) == []
    tick(store, svc, 2)
    assert bodies(store) == [b"body-a", b"body-b"]
    assert svc.offset_table()[18] == 2


def test_levels_are_independent_and_in_order(store, clock):
    assert put_scheduled(store, [msg("slow", DELAY=3)]).ok  # 10 s
    clock.advance(1)
    assert put_scheduled(store, [msg("fast1", DELAY=1)]).ok  # 1 s
    clock.advance(0.5)
    assert put_scheduled(store, [msg("fast2", DELAY=1)]).ok
    svc = ScheduleService(store, clock)
    tick(store, svc, 0.6)
    assert bodies(store) == [b"body-fast1"]
    tick(store, svc, 0.5)
    assert bodies(store) == [b"body-fast1", b"body-fast2"]
    tick(store, svc, 8)
    assert bodies(store)[-1] == b"body-slow"


def test_deliver_at_timestamps(store, clock):
    svc = ScheduleService(store, clock)
    assert put_scheduled(store, [msg("late", TIMER_DELIVER_MS=NOW + 60_000)]).ok
    assert put_scheduled(store, [msg("seven", TIMER_DELIVER_MS=NOW + 7000)]).ok
    assert put_scheduled(store, [msg("three", TIMER_DELAY_SEC=3)]).ok
    past = put_scheduled(store, [msg("past", TIMER_DELIVER_MS=NOW - 5000)])
    assert past.ok
    assert bodies(store) == [b"body-past"]  # stored straight into the real topic
    store.reput.catch_up()
    assert store.max_offset_in_queue(SCHEDULE_TOPIC, 18) == 3
    tick(store, svc, 2.9)
    assert bodies(store) == [b"body-past"]
    tick(store, svc, 0.1)
    assert bodies(store) == [b"body-past", b"body-three"]  # not held back by "late"
    tick(store, svc, 3.9)
    assert bodies(store)[-1] == b"body-three"
    tick(store, svc, 0.1)
    assert bodies(store)[-1] == b"body-seven"
    assert svc.offset_table()[19] == 0  # "late" (index 0) still pending
    tick(store, svc, 53)
    assert bodies(store) == [b"body-past", b"body-three", b"body-seven", b"body-late"]
    assert svc.offset_table()[19] == 3


def test_too_far_in_the_future_rejected(store):
    r = put_scheduled(store, [msg("a", TIMER_DELIVER_MS=NOW + (MAX_DELAY + 1) * 1000)])
    assert r.status is PutStatus.MESSAGE_ILLEGAL and "delivery time" in r.reason
    assert put_scheduled(store, [msg("b", topic=SCHEDULE_TOPIC, DELAY=1)]).status \
        is PutStatus.MESSAGE_ILLEGAL  # producers cannot write the schedule topic directly
    store.reput.catch_up()
    assert store.max_offset_in_queue(SCHEDULE_TOPIC, 18) == 0


def test_offsets_survive_restart_without_redelivery(tmp_path, clock):
    s = open_store(tmp_path, clock)
    assert put_scheduled(s, [msg("a", DELAY=1)]).ok
    clock.advance(2)
    assert put_scheduled(s, [msg("b", DELAY=1),
                             msg("late", TIMER_DELIVER_MS=clock.now_ms() + 60_000),
                             msg("soon", TIMER_DELIVER_MS=clock.now_ms() + 3000)]).ok
    svc = attach(s)
    assert s.schedule is svc
    tick(s, svc, 0)
    assert bodies(s) == [b"body-a"]
    tick(s, svc, 3)
    assert bodies(s) == [b"body-a", b"body-b", b"body-soon"]
    with open(StoreLayout(str(tmp_path)).delay_offset) as f:
        data = json.load(f)
    assert data["offsetTable"] == {"1": 2, "19": 0}  # "late" holds the timestamp watermark
    s.shutdown()

    s = open_store(tmp_path, clock)
    svc = ScheduleService(s, clock)
    assert svc.offset_table() == {1: 2, 19: 0}
    tick(s, svc, 1)
    assert bodies(s) == [b"body-a", b"body-b", b"body-soon"]  # nothing delivered twice
    assert put_scheduled(s, [msg("c", DELAY=1)]).ok
    tick(s, svc, 1)
    assert bodies(s) == [b"body-a", b"body-b", b"body-soon", b"body-c"]
    tick(s, svc, 60)
    assert bodies(s) == [b"body-a", b"body-b", b"body-soon", b"body-c", b"body-late"]
    assert svc.offset_table() == {1: 3, 19: 2}
    s.shutdown()

    s = open_store(tmp_path, clock)
    svc = ScheduleService(s, clock)
    tick(s, svc, 3600)
    assert len(bodies(s)) == 5
    assert svc.stats.delivered == 0
    s.shutdown()


def test_put_failure_keeps_offset_and_retries(store, clock):
    assert put_scheduled(store, [msg("a", DELAY=1), msg("t", TIMER_DELAY_SEC=1)]).ok
    svc = ScheduleService(store, clock)
    store.flags.set(rf.DISK_FULL, "test")
    tick(store, svc, 2)
    tick(store, svc, 1)
    assert real(store) == []
    assert svc.offset_table().get(1, 0) == 0 and svc.offset_table().get(19, 0) == 0
    assert svc.stats.put_failures >= 2 and "SERVICE_NOT_AVAILABLE" in svc.stats.last_failure
    assert svc.delivery_lag_ms() >= 2000
    store.flags.clear(rf.DISK_FULL)
    tick(store, svc)
    assert sorted(bodies(store)) == [b"body-a", b"body-t"]
    assert svc.offset_table()[1] == 1 and svc.offset_table()[19] == 1
    assert svc.stats.dropped == 0


def test_offset_below_queue_min_is_raised(store, clock):
    r = put_scheduled(store, [msg("gone", DELAY=1), msg("kept", DELAY=1)])
    assert r.ok
    store.reput.catch_up()
    cq = store.cq_store.find(SCHEDULE_TOPIC, 0)
    cq.correct_min_offset(r.appends[1].wrote_offset)  # as if retention removed the first
    assert cq.min_offset() == 1
    svc = ScheduleService(store, clock)
    tick(store, svc, 2)
    assert bodies(store) == [b"body-kept"]
    assert svc.offset_table()[1] == 2


def test_unusable_schedule_message_is_dropped(store, clock):
    bad = msg("bad", DELAY=1)
    bad.topic, bad.queue_id = SCHEDULE_TOPIC, 0  # no REAL_TOPIC
    sys_topic = to_schedule(msg("sys", DELAY=1), LEVELS, NOW, MAX_DELAY)
    sys_topic.properties["REAL_TOPIC"] = "TBW102"  # refused for good by the store
    ok = to_schedule(msg("ok", DELAY=1), LEVELS, NOW, MAX_DELAY)
    assert store.put_messages([bad, sys_topic, ok], allow_system_topic=True).ok
    svc = ScheduleService(store, clock)
    tick(store, svc, 2)
    assert bodies(store) == [b"body-ok"]
    assert svc.stats.dropped == 2 and svc.offset_table()[1] == 3


def test_slave_delivers_nothing(tmp_path, clock):
    s = open_store(tmp_path, clock, broker_role="SLAVE")
    assert put_scheduled(s, [msg("a", DELAY=1)]).ok
    svc = ScheduleService(s, clock)
    tick(s, svc, 5)
    assert real(s) == []
    s.shutdown()


def test_many_due_messages_across_rounds(store, clock):
    batch = [msg(f"m{i}", qid=i % 2, DELAY=1) for i in range(150)]
    assert put_scheduled(store, batch).ok
    timers = [msg(f"t{i}", qid=2, TIMER_DELIVER_MS=NOW + 1000 + (150 - i)) for i in range(150)]
    assert put_scheduled(store, timers).ok
    svc = ScheduleService(store, clock, max_timer_pending=40)
    tick(store, svc, 2)
    assert len(real(store, qid=0)) == 75 and len(real(store, qid=1)) == 75
    delivered = bodies(store, qid=2)
    assert sorted(delivered) == sorted(m.body for m in timers)
    # earliest delivery time first within the read-ahead window of 40 units
    assert delivered[:40] == [m.body for m in reversed(timers[:40])]
    assert svc.offset_table() == {1: 150, 19: 150}


# -- progress replicates with the deliveries ---------------------------------------------------------
def promote(store: MessageStore) -> None:
    """What a node does to its store when it becomes master (cluster/assembly/node.py)."""
    store.reconfigure(dataclasses.replace(store.config, broker_role="ASYNC_MASTER"))
    store.prepare_for_writes()


def counts(store, topic="Orders", qid=3) -> dict[bytes, int]:
    return dict(collections.Counter(bodies(store, topic, qid)))


def test_each_delivery_batch_ends_with_its_progress_record(store, clock):
    assert put_scheduled(store, [msg(f"a{i}", DELAY=1) for i in range(3)]).ok
    svc = ScheduleService(store, clock)
    tick(store, svc, 2)
    delivered = real(store)
    [progress] = store.get_messages(PROGRESS_TOPIC, 0, 0, 10).messages
    assert progress.tags == "progress"
    assert progress.physical_offset == delivered[-1].physical_offset + delivered[-1].total_size
    assert json.loads(progress.body) == {"offsetTable": {"1": 3}}
    with open(StoreLayout(store.root).delay_offset) as f:
        assert json.load(f) == {"offsetTable": {"1": 3}}  # the view


def test_a_promoted_replica_neither_redelivers_nor_skips(tmp_path, clock):
    master = open_store(tmp_path / "master", clock)
    slave = open_store(tmp_path / "slave", clock, broker_role="SLAVE")
    try:
        assert put_scheduled(master, [msg(f"fast{i}", DELAY=1) for i in range(5)]).ok
        assert put_scheduled(master, [msg(f"slow{i}", DELAY=3) for i in range(5)]).ok  # 10 s
        assert put_scheduled(master, [msg(f"at{i}", TIMER_DELAY_SEC=2 + 20 * i)
                                      for i in range(3)]).ok
        svc = ScheduleService(master, clock)
        tick(master, svc, 2.5)  # fast0-4 and at0 delivered by the master
        assert len(real(master)) == 6
        replicate(master, slave, master.max_phy_offset())
        follower = ScheduleService(slave, clock)
        follower.step()  # a slave delivers nothing and follows the progress records
        assert real(slave) == real(master) and follower.offset_table()[1] == 5
        with open(StoreLayout(slave.root).delay_offset) as f:
            assert json.load(f)["offsetTable"]["1"] == 5  # the slave's view
        # the master dies; the slave is promoted
        slave.reconfigure(dataclasses.replace(slave.config, broker_role="ASYNC_MASTER"))
        tick(slave, follower, 0)  # between roles (no prepare_for_writes yet): nothing happens
        assert len(real(slave)) == 6
        slave.prepare_for_writes()
        tick(slave, follower, 0)
        assert len(real(slave)) == 6  # nothing the old master delivered comes again
        tick(slave, follower, 8)
        tick(slave, follower, 40)
        assert counts(slave) == {b"body-" + n.encode(): 1 for n in [
            *(f"fast{i}" for i in range(5)), *(f"slow{i}" for i in range(5)),
            *(f"at{i}" for i in range(3))]}
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_partly_replicated_last_batch_is_delivered_again_never_skipped(tmp_path, clock):
    master = open_store(tmp_path / "master", clock)
    slave = open_store(tmp_path / "slave", clock, broker_role="SLAVE")
    try:
        svc = ScheduleService(master, clock)
        assert put_scheduled(master, [msg(f"first{i}", DELAY=1) for i in range(4)]).ok
        tick(master, svc, 2)
        assert put_scheduled(master, [msg(f"second{i}", DELAY=1) for i in range(4)]).ok
        tick(master, svc, 2)
        second = real(master)[4:]
        assert [m.body for m in second] == [b"body-second%d" % i for i in range(4)]
        # a chunk ended inside the second batch: two of its deliveries, not its progress record
        replicate(master, slave, second[2].physical_offset)
        promote(slave)
        follower = ScheduleService(slave, clock)
        tick(slave, follower, 0)
        got = counts(slave)
        assert set(got) == {m.body for m in real(master)}  # nothing skipped
        assert {b for b, n in got.items() if n > 1} == {b"body-second0", b"body-second1"}
        assert all(n <= 2 for n in got.values())  # at least once for the last batch only
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_refused_message_in_a_batch_is_found_and_dropped_alone(store, clock):
    huge = msg("huge", DELAY=1)
    huge.body = b"x" * 5000
    assert put_scheduled(store, [msg("a", DELAY=1), huge, msg("b", DELAY=1)]).ok
    store.reconfigure(dataclasses.replace(store.config, max_message_size=4000))
    svc = ScheduleService(store, clock)
    tick(store, svc, 2)
    assert bodies(store) == [b"body-a", b"body-b"]
    assert svc.stats.dropped == 1 and svc.offset_table()[1] == 3

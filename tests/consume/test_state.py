"""The consumer state machine and the receive planner, in memory (no node)."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.consume.planner import plan_queue
from cluster.consume.records import CONSUMER_STATE_RECORDS as RECORDS, STATE_TOPIC
from cluster.consume.state import ConsumerState, GroupInfo, QueueState
from store.codec import Message
from store.get_result import GetMessageResult, GetStatus


class FakeRecord:
    """A stand-in for a decoded MessageRecord: only the fields the planner reads."""

    def __init__(self, offset: int, group: str = "") -> None:
        self.queue_offset = offset
        self.properties = {"__SHARDINGKEY": group} if group else {}


def reader(groups: list[str]):
    records = [FakeRecord(i, g) for i, g in enumerate(groups)]

    def read_from(offset: int, n: int) -> GetMessageResult:
        found = records[offset:offset + n]
        status = GetStatus.FOUND if found else GetStatus.NO_MESSAGE_IN_QUEUE
        return GetMessageResult(status, offset + len(found), 0, len(records), list(found))

    def read_at(offset: int):
        return records[offset] if offset < len(records) else None
    return read_at, read_from


def handles():
    counter = iter(range(1, 10 ** 9))
    return lambda: next(counter)


def test_committed_is_the_lowest_offset_in_flight_or_the_cursor():
    state = ConsumerState()
    key = {"group": "G", "topic": "T", "queue": 0}
    state.apply({"kind": "pop", **key, "base": 5, "until": 100, "skip_to": 0,
                 "items": [[5, 1, 1, ""], [6, 1, 2, ""], [7, 1, 3, ""]]})
    q = state.queue("G", "T", 0)
    assert q.cursor == 8 and q.committed == 5
    state.apply({"kind": "ack", **key, "offset": 6, "handle": 2})
    assert q.committed == 5
    state.apply({"kind": "ack", **key, "offset": 5, "handle": 99})  # stale handle: ignored
    assert q.committed == 5
    state.apply({"kind": "ack", **key, "offset": 5, "handle": 1})
    assert q.committed == 7
    state.apply({"kind": "change", **key, "offset": 7, "handle": 3, "new_handle": 4, "until": 500})
    assert q.inflight[7].handle == 4 and q.inflight[7].invisible_until == 500
    assert state.next_handle == 5
    state.apply({"kind": "offset", **key, "offset": 2})
    assert state.queue("G", "T", 0) == QueueState(2)


def test_planner_redelivers_expired_then_reads_new_and_sends_exhausted_to_dlq():
    read_at, read_from = reader([""] * 6)
    state = ConsumerState()
    key = {"group": "G", "topic": "T", "queue": 0}
    state.apply({"kind": "pop", **key, "base": 0, "until": 100, "skip_to": 0,
                 "items": [[0, 1, 1, ""], [1, 3, 2, ""], [2, 1, 3, ""]]})
    state.apply({"kind": "change", **key, "offset": 2, "handle": 3, "new_handle": 4, "until": 900})
    plan = plan_queue(0, state.queue("G", "T", 0), 0, 200, 3, fifo=False, max_attempts=3,
                      new_handle=handles(), read_at=read_at, read_from=read_from)
    assert [(x.offset, x.attempt) for x in plan.deliveries] == [(0, 2), (3, 1), (4, 1)]
    assert [offset for offset, _, _ in plan.dead] == [1]
    assert plan.skip_to == 5


def test_fifo_plan_hands_out_one_message_per_group_and_never_skips_a_blocked_one():
    read_at, read_from = reader(["A", "B", "A", "C", "B"])
    plan = plan_queue(0, None, 0, 0, 10, fifo=True, max_attempts=17, new_handle=handles(),
                      read_at=read_at, read_from=read_from)
    assert [x.offset for x in plan.deliveries] == [0, 1]
    assert plan.skip_to == 2  # stops at the second A: C (offset 3) waits behind it
    state = ConsumerState()
    state.apply({"kind": "pop", "group": "G", "topic": "T", "queue": 0, "base": 0, "until": 50,
                 "skip_to": plan.skip_to,
                 "items": [[x.offset, x.attempt, x.handle, x.message_group] for x in plan.deliveries]})
    state.apply({"kind": "ack", "group": "G", "topic": "T", "queue": 0, "offset": 0, "handle": 1})
    again = plan_queue(0, state.queue("G", "T", 0), 0, 10, 10, fifo=True, max_attempts=17,
                       new_handle=handles(), read_at=read_at, read_from=read_from)
    assert [x.offset for x in again.deliveries] == [2, 3]  # B (4) still blocked by offset 1


events = st.lists(st.one_of(
    st.builds(lambda q, items, until, skip: {"kind": "pop", "group": "G", "topic": "T",
                                             "queue": q, "base": 0, "until": until,
                                             "skip_to": skip, "items": items},
              st.integers(0, 2),
              st.lists(st.tuples(st.integers(0, 50), st.integers(1, 5), st.integers(1, 200),
                                 st.sampled_from(["", "A", "B"])).map(list), max_size=4),
              st.integers(0, 10 ** 6), st.integers(0, 60)),
    st.builds(lambda q, o, h: {"kind": "ack", "group": "G", "topic": "T", "queue": q,
                               "offset": o, "handle": h},
              st.integers(0, 2), st.integers(0, 50), st.integers(1, 200)),
    st.builds(lambda q, o: {"kind": "offset", "group": "G", "topic": "T", "queue": q, "offset": o},
              st.integers(0, 2), st.integers(0, 50)),
    st.builds(lambda f, r: {"kind": "group", "group": "G", "fifo": f, "retry_max_times": r},
              st.booleans(), st.integers(0, 20)),
), max_size=30)


@settings(max_examples=60, deadline=None)
@given(events, events)
def test_a_snapshot_then_the_rest_replays_to_the_same_state(before, after):
    live = ConsumerState()
    for e in before:
        live.apply(e)
    log = [RECORDS.to_message(e) for e in before] + [RECORDS.to_message(live.snapshot_event())]
    for e in after:
        live.apply(e)
        log.append(RECORDS.to_message(e))
    replayed = ConsumerState()
    for m in log:  # every record goes through its commitlog encoding
        assert m.topic == STATE_TOPIC
        replayed.apply(RECORDS.from_body(m.body))
    assert replayed.queues == live.queues
    assert replayed.groups == live.groups
    assert replayed.next_handle == live.next_handle


def test_pop_records_do_not_wait_and_acks_do():
    pop = RECORDS.to_message({"kind": "pop", "group": "G", "topic": "T", "queue": 0, "base": 0,
                      "until": 1, "skip_to": 0, "items": []})
    ack = RECORDS.to_message({"kind": "ack", "group": "G", "topic": "T", "queue": 0, "offset": 0,
                      "handle": 1})
    assert pop.properties.get("WAIT") == "false" and "WAIT" not in ack.properties
    assert json.loads(ack.body)["kind"] == "ack" and ack.properties["TAGS"] == "ack"
    assert isinstance(pop, Message)


def test_group_info_validates_retry_times():
    assert GroupInfo("G").max_delivery_attempts == 17
    try:
        GroupInfo("G", retry_max_times=-1)
    except ValueError as e:
        assert "retry_max_times" in str(e)
    else:
        raise AssertionError("negative retry_max_times accepted")

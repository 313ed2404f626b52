"""The consumer state machine in memory (no node): applying events, replaying a snapshot and
what follows through the records' encoding, group settings."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.consume.records import CONSUMER_STATE_RECORDS as RECORDS
from cluster.consume.state import ConsumerState, GroupInfo, QueueState
from tests.support.table_replay import assert_replays


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


def test_acks_of_one_request_apply_like_one_ack_each():
    """An `acks` record (one per AckMessage request) ends exactly the deliveries whose handle
    is current, across queues, like the per-entry `ack` records of earlier versions, which
    still replay."""
    def popped() -> ConsumerState:
        state = ConsumerState()
        for queue in (0, 1):
            state.apply({"kind": "pop", "group": "G", "topic": "T", "queue": queue, "base": 0,
                         "until": 100, "skip_to": 0,
                         "items": [[0, 1, 10 + queue * 10, ""], [1, 1, 11 + queue * 10, ""]]})
        return state

    batched = popped()
    batched.apply({"kind": "acks", "group": "G", "topic": "T",
                   "items": [[0, 0, 10], [0, 1, 99], [1, 1, 21], [2, 0, 10]]})  # 99: stale
    one_by_one = popped()
    for queue, offset, handle in [[0, 0, 10], [0, 1, 99], [1, 1, 21], [2, 0, 10]]:
        one_by_one.apply({"kind": "ack", "group": "G", "topic": "T", "queue": queue,
                          "offset": offset, "handle": handle})
    assert batched.queues == one_by_one.queues
    assert sorted(batched.queue("G", "T", 0).inflight) == [1]
    assert sorted(batched.queue("G", "T", 1).inflight) == [0]
    assert batched.queue("G", "T", 2) is None  # an ack of an unknown queue creates nothing


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
    st.builds(lambda items: {"kind": "acks", "group": "G", "topic": "T", "items": items},
              st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50),
                                 st.integers(1, 200)).map(list), max_size=4)),
    st.builds(lambda q, o: {"kind": "offset", "group": "G", "topic": "T", "queue": q, "offset": o},
              st.integers(0, 2), st.integers(0, 50)),
    st.builds(lambda f, r: {"kind": "group", "group": "G", "fifo": f, "retry_max_times": r},
              st.booleans(), st.integers(0, 20)),
), max_size=30)


@settings(max_examples=60, deadline=None)
@given(events, events)
def test_a_snapshot_then_the_rest_replays_to_the_same_state(before, after):
    assert_replays(ConsumerState, RECORDS, before, after, lambda st: (
        st.queues, st.groups, st.next_handle, st.subscription_group_table()))


def test_group_info_validates_retry_times():
    assert GroupInfo("G").max_delivery_attempts == 17
    try:
        GroupInfo("G", retry_max_times=-1)
    except ValueError as e:
        assert "retry_max_times" in str(e)
    else:
        raise AssertionError("negative retry_max_times accepted")

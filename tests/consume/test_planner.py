"""The receive planner in memory (no node): what one receive delivers from one queue, with
redelivery of expired deliveries, dead letters after the last attempt, and FIFO groups; a
property test against the earlier full-scan planner as the oracle."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.consume.planner import AnswerRoom, Delivery, QueuePlan, plan_queue
from cluster.consume.state import ConsumerState
from store.get_result import GetMessageResult, GetStatus


class FakeRecord:
    """A stand-in for a decoded MessageRecord: only the fields the planner reads."""

    def __init__(self, offset: int, group: str = "") -> None:
        self.queue_offset = offset
        self.properties = {"__SHARDINGKEY": group} if group else {}


def reader(groups: list[str]):
    return reader_of([FakeRecord(i, g) for i, g in enumerate(groups)])


def reader_of(records: list):
    """(read_at, read_from) over `records`, the queue's messages from offset 0."""
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


def test_offsets_acked_by_the_same_commit_are_neither_redelivered_nor_blocking():
    """AckAndReceive appends its acks with its deliveries: the plan treats the acked offsets
    as the applied acks would leave them, not in flight."""
    read_at, read_from = reader([""] * 4)
    state = ConsumerState()
    key = {"group": "G", "topic": "T", "queue": 0}
    state.apply({"kind": "pop", **key, "base": 0, "until": 100, "skip_to": 2,
                 "items": [[0, 1, 1, ""], [1, 1, 2, ""]]})
    q = state.queue("G", "T", 0)
    plans = [plan_queue(0, q, 0, 200, 10, fifo=False, max_attempts=17, new_handle=handles(),
                        read_at=read_at, read_from=read_from, acked=acked)
             for acked in ((), {0})]
    assert [[(x.offset, x.attempt) for x in p.deliveries] for p in plans] == [
        [(0, 2), (1, 2), (2, 1), (3, 1)], [(1, 2), (2, 1), (3, 1)]]
    # FIFO: the acked delivery (not yet expired) no longer blocks its message group
    read_at, read_from = reader(["A", "A"])
    state = ConsumerState()
    state.apply({"kind": "pop", **key, "base": 0, "until": 100, "skip_to": 1,
                 "items": [[0, 1, 1, "A"]]})
    q = state.queue("G", "T", 0)
    plans = [plan_queue(0, q, 0, 50, 10, fifo=True, max_attempts=17, new_handle=handles(),
                        read_at=read_at, read_from=read_from, acked=acked)
             for acked in ((), {0})]
    assert [[x.offset for x in p.deliveries] for p in plans] == [[], [1]]


def test_nothing_to_hand_out_changes_nothing():
    """A queue the group already read to its end: the plan delivers nothing and writes no
    state (an empty pop record would wake a long poll by its own dispatch, again and again)."""
    read_at, read_from = reader(["", ""])
    state = ConsumerState()
    state.apply({"kind": "pop", "group": "G", "topic": "T", "queue": 0, "base": 0, "until": 50,
                 "skip_to": 2, "items": []})
    q = state.queue("G", "T", 0)
    plan = plan_queue(0, q, 0, 100, 32, fifo=False, max_attempts=17, new_handle=handles(),
                      read_at=read_at, read_from=read_from)
    assert not plan.deliveries and plan.skip_to == 2 and not plan.changes_state
    fresh = plan_queue(0, None, 2, 100, 32, fifo=False, max_attempts=17, new_handle=handles(),
                       read_at=read_at, read_from=read_from)
    assert not fresh.changes_state  # a new group starting at the end, with nothing to read


def reference_plan(queue_id, q, base, now_ms, want, *, fifo, max_attempts, new_handle, read_at,
                   read_from):
    """The planner before it stopped sorting every in-flight offset: the oracle of the property
    below (one ascending pass over all of them, blocking groups as it goes)."""
    cursor = q.cursor if q is not None else base
    plan = QueuePlan(queue_id, base, cursor)
    inflight = q.inflight if q is not None else {}
    plan.skip_to = cursor
    blocked: set[str] = set()
    for offset in sorted(inflight):
        entry = inflight[offset]
        if entry.invisible_until > now_ms or len(plan.deliveries) >= want:
            if entry.message_group:
                blocked.add(entry.message_group)
            continue
        record = read_at(offset)
        if record is None:
            plan.vanished.append((offset, entry))
        elif entry.attempt >= max_attempts:
            plan.dead.append((offset, entry, record))
        else:
            plan.deliveries.append(Delivery(record, offset, entry.attempt + 1, new_handle(),
                                            entry.message_group))
            if entry.message_group:
                blocked.add(entry.message_group)
    room = want - len(plan.deliveries)
    if room <= 0:
        return plan
    result = read_from(cursor, room)
    for record in result.messages:
        group = record.properties.get("__SHARDINGKEY", "") if fifo else ""
        if group and group in blocked:
            plan.skip_to = max(cursor, record.queue_offset)
            return plan
        plan.deliveries.append(Delivery(record, record.queue_offset, 1, new_handle(), group))
        if group:
            blocked.add(group)
    plan.skip_to = max(cursor, result.next_begin_offset)
    return plan


GROUPS = st.sampled_from(["", "", "A", "B", "C"])


@settings(max_examples=400, deadline=None)
@given(groups=st.lists(GROUPS, min_size=0, max_size=30),
       inflight=st.dictionaries(st.integers(0, 34), st.tuples(
           st.integers(1, 4), st.integers(0, 200), GROUPS), max_size=20),
       cursor=st.integers(0, 32), now=st.integers(0, 200), want=st.integers(1, 8),
       fifo=st.booleans(), max_attempts=st.integers(1, 4))
def test_the_planner_decides_what_the_full_scan_decided(groups, inflight, cursor, now, want, fifo,
                                                         max_attempts):
    """Random queues, in-flight deliveries (some expired, some exhausted, some past the end
    of the queue: vanished), FIFO or not: the same deliveries, handles, dead letters,
    vanished entries and cursor as the planner that scanned every in-flight offset."""
    read_at, read_from = reader(groups)
    state = ConsumerState()
    key = {"group": "G", "topic": "T", "queue": 0}
    state.apply({"kind": "pop", **key, "base": 0, "until": 0, "skip_to": cursor, "items": []})
    for handle, (offset, (attempt, until, group)) in enumerate(sorted(inflight.items()), 1):
        state.apply({"kind": "pop", **key, "base": 0, "until": until, "skip_to": cursor,
                     "items": [[offset, attempt, handle, group]]})
    q = state.queue("G", "T", 0)
    args = dict(fifo=fifo, max_attempts=max_attempts, read_at=read_at, read_from=read_from)
    got = plan_queue(0, q, 0, now, want, new_handle=handles(), **args)
    expected = reference_plan(0, q, 0, now, want, new_handle=handles(), **args)
    assert got == expected


class SizedRecord(FakeRecord):
    def __init__(self, offset: int, size: int) -> None:
        super().__init__(offset)
        self.total_size = size


def sized_reader(sizes: list[int]):
    return reader_of([SizedRecord(i, s) for i, s in enumerate(sizes)])


def test_a_byte_budget_stops_new_messages_and_the_cursor_at_the_first_left_out():
    read_at, read_from = sized_reader([400, 400, 400, 100])
    room = AnswerRoom(1000)
    plan = plan_queue(0, None, 0, 0, 10, fifo=False, max_attempts=17, new_handle=handles(),
                      read_at=read_at, read_from=read_from, room=room)
    assert [x.offset for x in plan.deliveries] == [0, 1]
    assert plan.skip_to == 2  # offset 2 did not fit: the next receive starts there
    assert room.left == 200 and room.full is False  # what the receive's other queues get
    unlimited = plan_queue(0, None, 0, 0, 10, fifo=False, max_attempts=17,
                           new_handle=handles(), read_at=read_at, read_from=read_from)
    assert [x.offset for x in unlimited.deliveries] == [0, 1, 2, 3]


def test_the_first_delivery_of_a_receive_goes_out_whatever_its_size():
    read_at, read_from = sized_reader([5000, 10])
    alone = plan_queue(0, None, 0, 0, 10, fifo=False, max_attempts=17, new_handle=handles(),
                       read_at=read_at, read_from=read_from, room=AnswerRoom(1000))
    assert [x.offset for x in alone.deliveries] == [0] and alone.skip_to == 1
    # not first (another queue of the receive took the room before): nothing, the cursor stays
    used = AnswerRoom(1000)
    assert used.take(SizedRecord(9, 600))
    later = plan_queue(0, None, 0, 0, 10, fifo=False, max_attempts=17, new_handle=handles(),
                       read_at=read_at, read_from=read_from, room=used)
    assert later.deliveries == [] and later.skip_to == 0 and not later.changes_state


def test_expired_deliveries_left_out_for_room_stay_in_flight():
    read_at, read_from = sized_reader([600, 600, 600])
    state = ConsumerState()
    key = {"group": "G", "topic": "T", "queue": 0}
    state.apply({"kind": "pop", **key, "base": 0, "until": 100, "skip_to": 3,
                 "items": [[0, 1, 1, ""], [1, 1, 2, ""], [2, 1, 3, ""]]})
    q = state.queue("G", "T", 0)
    plan = plan_queue(0, q, 0, 200, 10, fifo=False, max_attempts=17, new_handle=handles(),
                      read_at=read_at, read_from=read_from, room=AnswerRoom(1000))
    assert [(x.offset, x.attempt) for x in plan.deliveries] == [(0, 2)]
    assert not plan.dead and not plan.vanished and plan.skip_to == 3
    assert sorted(q.inflight) == [0, 1, 2]  # 1 and 2 wait for the next receive

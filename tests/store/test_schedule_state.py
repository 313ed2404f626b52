"""ScheduleState (store/schedule/schedule_state.py) in memory: the table's round trip, the timestamp
queue's read-ahead heap, delivered marks across a restart, undo of a failed batch, and a
property test: whatever the reads, failures and restarts, every unit of the timestamp queue is
delivered exactly once (while few are pending, the table remembers exactly what was)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.schedule.schedule_state import TIMER_STATE_PERSIST_MAX, ScheduleState

TIMER_QID = 18  # 18 delay levels, the timestamp queue after them


def restarted(state: ScheduleState) -> ScheduleState:
    again = ScheduleState(state.timer_qid)
    again.apply_table(state.encode())
    return again


def test_the_table_round_trips_levels_and_foreign_keys():
    state = ScheduleState(TIMER_QID)
    state.apply_table({"offsetTable": {"1": 5, "3": 7, "99": 4}})
    assert state.levels_table() == {1: 5, 3: 7}
    assert state.encode() == {"offsetTable": {"99": 4, "1": 5, "3": 7}}
    state.set_offset(0, 6)
    assert state.dirty and state.offset(0) == 6 and state.offset(1) == 0


@pytest.mark.parametrize("table", [
    {"offsetTable": []}, {"offsetTable": {"1": -1}}, {"offsetTable": {"1": True}},
    {"offsetTable": {"x": 1}}, {"offsetTable": {"1": "2"}}])
def test_a_malformed_table_changes_nothing(table):
    state = ScheduleState(TIMER_QID)
    state.apply_table({"offsetTable": {"2": 3}})
    with pytest.raises((ValueError, TypeError, AttributeError)):
        state.apply_table(table)
    assert state.levels_table() == {2: 3}


def test_delivered_above_the_watermark_is_skipped_after_a_restart():
    state = ScheduleState(TIMER_QID)
    for index, deliver in enumerate([30, 10, 20]):
        state.read_ahead(index, deliver, 1000 + index, 100)
    units, _, _ = state.take_due(15, 10)  # index 1 (due at 10)
    assert [u[1] for u in units] == [1]
    assert state.watermark() == 0  # index 0 is still pending
    table = state.encode()
    assert table["timerQueueState"] == {"scanOffset": 3, "pending": [0, 2]}
    again = restarted(state)
    assert again.scan == 0
    passed = [again.read_ahead(i, d, 1000 + i, 100) for i, d in enumerate([30, 10, 20])]
    assert passed == [1, 1, 1] and sorted(again.pending) == [0, 2]  # 1 skipped
    again.skips_done()
    assert again.skip_below == 0 and not again.keep


def test_undo_puts_a_failed_batch_back_as_it_was():
    state = ScheduleState(TIMER_QID)
    state.set_offset(TIMER_QID, 0)  # each round sets the watermark
    for index in range(4):
        state.read_ahead(index, 10 * index, index, 1)
    before = (sorted(state.heap), set(state.pending), state.encode())
    units, kept, wm = state.take_due(25, 10)
    assert [u[1] for u in units] == [0, 1, 2] and state.watermark() == 3
    state.undo(units, kept, wm)
    assert (sorted(state.heap), set(state.pending), state.encode()) == before
    assert state.watermark() == 0


def test_truncation_forgets_what_is_gone():
    state = ScheduleState(TIMER_QID)
    for index in range(5):
        state.read_ahead(index, 100, index, 1)
    assert state.within(0, 5) is False and state.scan == 5  # nothing cut
    assert state.within(0, 3) is True
    assert state.scan == 3 and sorted(state.pending) == [0, 1, 2]
    assert sorted(u[1] for u in state.heap) == [0, 1, 2]


def test_reading_starts_at_the_queues_first_index():
    state = ScheduleState(TIMER_QID)  # the queue's head was deleted: read on from its start
    assert state.within(7, 20) is False and state.scan == 7


def test_too_many_pending_keeps_only_the_watermark():
    state = ScheduleState(TIMER_QID)
    for index in range(TIMER_STATE_PERSIST_MAX + 2):
        state.read_ahead(index, 1000, index, 1)
    assert "timerQueueState" not in state.encode()


operations = st.lists(st.tuples(st.sampled_from(["read", "deliver", "fail", "restart"]),
                                st.integers(1, 8)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=40), operations)
def test_every_unit_is_delivered_exactly_once(delivery_times, ops):
    """A timestamp queue of len(delivery_times) units; reads of up to n units, deliveries of
    what is due at a moving clock that succeed or fail (undo), restarts from the table."""
    state = ScheduleState(TIMER_QID)
    delivered: list[int] = []
    now = 0

    def read(n: int) -> None:
        for index in range(state.scan, min(state.scan + n, len(delivery_times))):
            state.read_ahead(index, delivery_times[index], index, 1)

    def deliver(n: int, ok: bool) -> None:
        units, kept, before = state.take_due(now, n)
        if ok:
            delivered.extend(u[1] for u in units)
            state.skips_done()
        else:
            state.undo(units, kept, before)

    for op, n in ops:
        now += n
        if op == "read":
            read(n)
        elif op in ("deliver", "fail"):
            deliver(n, op == "deliver")
        else:
            state = restarted(state)
    now = 10**9
    while state.scan < len(delivery_times) or state.pending:
        read(8)
        deliver(8, True)
    assert sorted(delivered) == list(range(len(delivery_times)))
    assert state.watermark() == len(delivery_times)

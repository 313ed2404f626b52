"""ReputService driven by step() over real files: consume queue and index contents, the
dispatch bound (confirm/flushed offset), transactions, rolling files, budgets, corrupt records
and failing dispatchers."""
from __future__ import annotations

import pytest

from store import codec
from tests.store.store_parts import (COMMITLOG_FILE, COMMIT, PREPARED, ROLLBACK, Parts,
                                     message)


@pytest.fixture
def parts(tmp_path):
    p = Parts(tmp_path)
    yield p
    p.close()


def test_step_fills_consume_queues_and_index_across_rolled_files(parts):
    appends = parts.put_all(message(i, queue_id=i % 2) for i in range(60))
    assert len(parts.commitlog.queue) > 2  # files rolled with BLANK fillers
    assert parts.reput.behind() == parts.commitlog.max_offset()
    parts.reput.step()
    assert parts.reput.behind() == 0 and parts.reput.reput_from_offset == parts.commitlog.max_offset()
    for qid in (0, 1):
        units = parts.units("Orders", qid)
        mine = [a for i, a in enumerate(appends) if i % 2 == qid]
        assert [u[0] for u in units] == list(range(30))
        assert [(u[1], u[2]) for u in units] == [(a.wrote_offset, a.wrote_bytes) for a in mine]
        assert all(u[3] == codec.java_string_hash("TagA" if qid else "TagB") for u in units)
    for i in (0, 31, 59):
        assert parts.index.query("Orders", f"k{i}", 8, 0, 2 ** 62) == [appends[i].wrote_offset]
        assert parts.index.query("Orders", f"UNIQ{i:028d}", 8, 0, 2 ** 62) == [appends[i].wrote_offset]
    assert parts.reput.step() is None and parts.reput.dispatch_available() == 0  # nothing new


def test_dispatch_stops_at_the_bound_and_resumes_when_it_moves(parts):
    appends = parts.put_all(message(i) for i in range(10))
    parts.bound = appends[3].wrote_offset + 10  # inside record 3: it is not dispatched
    parts.reput.step()
    assert parts.reput.reput_from_offset == appends[3].wrote_offset
    assert [u[1] for u in parts.units("Orders", 0)] == [a.wrote_offset for a in appends[:3]]
    assert parts.index.query("Orders", "k3", 8, 0, 2 ** 62) == []
    assert parts.reput.behind() == 10
    parts.bound = appends[6].end_offset  # exactly the end of record 6
    parts.reput.step()
    assert parts.reput.reput_from_offset == appends[7].wrote_offset
    assert len(parts.units("Orders", 0)) == 7 and parts.reput.behind() == 0
    parts.bound = None
    assert parts.reput.catch_up() == 3
    assert len(parts.units("Orders", 0)) == 10


def test_prepared_and_rollback_records_are_walked_but_not_dispatched(parts):
    seen = []
    parts.reput.listeners.append(seen.extend)
    flags = [0, PREPARED, 0, ROLLBACK, COMMIT, 0]
    appends = parts.put_all(message(i, sys_flag=f) for i, f in enumerate(flags))
    parts.reput.step()
    assert parts.reput.reput_from_offset == parts.commitlog.max_offset()
    units = parts.units("Orders", 0)
    dispatched = [a for a, f in zip(appends, flags) if f not in (PREPARED, ROLLBACK)]
    assert [u[1] for u in units] == [a.wrote_offset for a in dispatched]
    assert [u[0] for u in units] == [0, 1, 2, 3]  # prepared/rollback take no queue offset
    for i in (1, 3):
        assert parts.index.query("Orders", f"k{i}", 8, 0, 2 ** 62) == []
    assert parts.index.query("Orders", "k4", 8, 0, 2 ** 62) == [appends[4].wrote_offset]
    # listeners see every record walked, dispatchable or not
    assert [r.commit_log_offset for r in seen] == [a.wrote_offset for a in appends]
    assert [r.dispatchable for r in seen] == [f not in (PREPARED, ROLLBACK) for f in flags]


def test_a_budget_dispatches_part_and_the_next_step_the_rest(parts):
    appends = parts.put_all(message(i) for i in range(20))
    n = parts.reput.dispatch_available(max_bytes=appends[5].wrote_offset + 1)
    assert n == 6  # records 0..5 start below the budget's end; record 5 is read whole
    assert parts.reput.reput_from_offset == appends[6].wrote_offset
    assert parts.reput.catch_up() == 14


def test_a_corrupt_record_stops_reput_where_it_lies(parts):
    appends = parts.put_all(message(i) for i in range(5))
    f = parts.commitlog.queue.find_by_offset(appends[2].wrote_offset)
    f.write_at(appends[2].wrote_offset - f.file_from_offset + 4, b"\xde\xad\xbe\xef")  # magic
    parts.reput.step()
    assert parts.reput.reput_from_offset == appends[2].wrote_offset
    assert parts.reput.corrupt_at == appends[2].wrote_offset
    assert len(parts.units("Orders", 0)) == 2
    parts.reput.step()  # stays there, never skips the record
    assert parts.reput.reput_from_offset == appends[2].wrote_offset


def test_a_failing_dispatcher_is_retried_from_the_same_record(parts):
    errors, cleared = [], []
    parts.reput.on_error = errors.append
    parts.reput.on_error_cleared = lambda: cleared.append(True)
    appends = parts.put_all(message(i) for i in range(6))

    class Flaky:
        fail_at = appends[3].wrote_offset

        def dispatch(self, request):
            if request.commit_log_offset == self.fail_at:
                raise OSError("disk full")

    flaky = Flaky()
    parts.reput.dispatchers.append(flaky)
    parts.reput.step()
    assert parts.reput.reput_from_offset == appends[3].wrote_offset
    assert parts.reput.dispatch_error and "disk full" in errors[0]
    assert parts.reput.wait_interval() == 1.0  # back off while it fails
    flaky.fail_at = -1
    parts.reput.step()
    assert parts.reput.reput_from_offset == parts.commitlog.max_offset()
    assert parts.reput.dispatch_error is None and cleared == [True]
    # the queue got each record once: record 3 was retried, not duplicated
    assert [u[1] for u in parts.units("Orders", 0)] == [a.wrote_offset for a in appends]


def test_a_batch_dispatcher_failing_mid_batch_is_retried_from_that_record(parts):
    """A dispatcher that takes batches (dispatch_many) and fails in the middle of one: reput
    finds the record record by record, resumes there, and the dispatchers after it saw only
    the records before it; nothing is dispatched twice into the queues or the index."""
    errors = []
    parts.reput.on_error = errors.append
    appends = parts.put_all(message(i) for i in range(8))
    seen = []

    class FlakyBatch:
        fail_at = appends[5].wrote_offset

        def dispatch_many(self, requests):
            for r in requests:
                self.dispatch(r)

        def dispatch(self, request):
            if request.commit_log_offset == self.fail_at:
                raise OSError("disk full")

    class After:
        def dispatch(self, request):
            seen.append(request.commit_log_offset)

    flaky = FlakyBatch()
    parts.reput.dispatchers[1:1] = [flaky]  # between the consume queues and the index
    parts.reput.dispatchers.append(After())
    parts.reput.step()
    assert parts.reput.reput_from_offset == appends[5].wrote_offset
    assert "disk full" in errors[0]
    assert seen == [a.wrote_offset for a in appends[:5]]
    assert parts.index.query("Orders", "k6", 8, 0, 2 ** 62) == []  # the index is after it
    flaky.fail_at = -1
    parts.reput.step()
    assert parts.reput.reput_from_offset == parts.commitlog.max_offset()
    assert seen == [a.wrote_offset for a in appends]
    assert [u[1] for u in parts.units("Orders", 0)] == [a.wrote_offset for a in appends]
    for i in range(8):
        assert parts.index.query("Orders", f"k{i}", 8, 0, 2 ** 62) == [appends[i].wrote_offset]


def test_reput_skips_what_retention_removed(parts):
    appends = parts.put_all(message(i) for i in range(40))
    first = parts.commitlog.queue.first_file
    parts.commitlog.queue.delete_first_files(lambda f: f is first, 1, 0, 0)
    assert parts.commitlog.min_offset() == COMMITLOG_FILE
    parts.reput.step()
    units = parts.units("Orders", 0)
    assert units[0][1] == COMMITLOG_FILE and parts.reput.behind() == 0
    assert [u[1] for u in units] == [a.wrote_offset for a in appends if a.wrote_offset >= COMMITLOG_FILE]


def test_schedule_topic_units_carry_the_delivery_time(parts):
    sched = message(1, topic="SCHEDULE_TOPIC_XXXX", queue_id=1, keys="")
    sched.properties[codec.PROPERTY_DELAY_TIME_LEVEL] = "2"
    a = parts.put(sched)
    parts.reput.step()
    (unit,) = parts.units("SCHEDULE_TOPIC_XXXX", 1)
    assert unit[3] == a.store_timestamp + 5000  # level 2 of DELAY_LEVELS

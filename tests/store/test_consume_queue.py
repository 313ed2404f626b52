"""ConsumeQueue / ConsumeQueueStore: RocketMQ unit layout, fillers, repeats, recovery,
crash-safe truncation, retention, time lookup, and oracle checks against plain dicts."""
from __future__ import annotations

import bisect
import errno
import os
import struct
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.queue.consume_queue import ConsumeQueue
from store.queue.consume_queue_store import ConsumeQueueStore
from store.codec.dispatch import DispatchRequest
from store.commitlog.fileio import FileIO

UNIT = 20
FILE_UNITS = 5
FILE_SIZE = FILE_UNITS * UNIT
# Hand-assembled from the layout: commitLogOffset i64, size i32, tagsCode i64, big-endian.
TAG_A = 2598919  # "TagA".hashCode(), as RocketMQ writes it
GOLDEN_UNITS = [(4096, 187, TAG_A), (4283, 200, -1234567890123), (4483, 150, 0)]
GOLDEN = b"".join(struct.pack(">qiq", *u) for u in GOLDEN_UNITS)
FILLER = struct.pack(">qiq", 0, 0x7FFFFFFF, 0)
PREPARED = 0x4  # MessageSysFlag.TRANSACTION_PREPARED_TYPE
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def req(index: int, phy: int, size: int = 100, tags: int = 0, topic: str = "TopicTest",
        qid: int = 0, sys_flag: int = 0, ts: int = 0) -> DispatchRequest:
    return DispatchRequest(topic, qid, phy, size, tags, ts, index, "", None, sys_flag, 0, "")


def fresh(root, file_size: int = FILE_SIZE, topic: str = "TopicTest", qid: int = 0,
          io: FileIO | None = None) -> ConsumeQueue:
    cq = ConsumeQueue(topic, qid, str(root), file_size, io or FileIO())
    cq.load()
    cq.recover()
    return cq


def fill(cq: ConsumeQueue, n: int, start: int = 0, phy0: int = 1000, size: int = 100) -> None:
    for i in range(start, start + n):
        cq.put(req(i, phy0 + i * size, size, tags=i))


def file_bytes(cq: ConsumeQueue, start_offset: int) -> bytes:
    with open(os.path.join(cq.directory, f"{start_offset:020d}"), "rb") as fh:
        return fh.read()


# -- golden bytes ---------------------------------------------------------------------------
def test_golden_file_read_by_code(tmp_path):
    qdir = tmp_path / "TopicTest" / "0"
    qdir.mkdir(parents=True)
    (qdir / f"{0:020d}").write_bytes(GOLDEN + bytes(FILE_SIZE - len(GOLDEN)))
    cq = fresh(tmp_path)
    assert cq.max_offset() == 3 and cq.min_offset() == 0
    assert cq.max_physic_offset == 4483 + 150
    assert [cq.get_unit(i) for i in range(4)] == [*GOLDEN_UNITS, None]
    assert list(cq.iter_units(0, 10)) == [(i, *u) for i, u in enumerate(GOLDEN_UNITS)]
    last = cq.mfq.last_file
    assert last.wrote_position == last.flushed_position == 3 * UNIT


def test_code_writes_golden_bytes(tmp_path):
    cq = fresh(tmp_path)
    for i, (phy, size, tags) in enumerate(GOLDEN_UNITS):
        cq.put(req(i, phy, size, tags))
    cq.flush()
    cq.close()
    assert file_bytes(cq, 0) == GOLDEN + bytes(FILE_SIZE - len(GOLDEN))


def test_default_file_size_is_rocketmq_default(tmp_path):
    cq = ConsumeQueue("T", 1, str(tmp_path), io=FileIO())
    assert cq.file_size == 300_000 * 20
    with pytest.raises(ValueError):
        ConsumeQueue("T", 1, str(tmp_path), 1001, FileIO())


# -- fillers, gaps, repeats -----------------------------------------------------------------
def test_first_unit_mid_file_fills_pre_blank(tmp_path):
    cq = fresh(tmp_path)
    cq.put(req(7, 5000, 120, 9))
    # First file starts at the boundary below unit 7 (byte 140 -> file 100 = units 5..9).
    assert os.listdir(cq.directory) == [f"{FILE_SIZE:020d}"]
    assert cq.min_offset() == 7 and cq.max_offset() == 8
    cq.flush()
    cq.close()
    raw = file_bytes(cq, FILE_SIZE)
    assert raw == FILLER * 2 + struct.pack(">qiq", 5000, 120, 9) + bytes(2 * UNIT)
    cq = fresh(tmp_path)  # recovery reads fillers as written and skips them for min
    assert (cq.min_offset(), cq.max_offset(), cq.max_physic_offset) == (7, 8, 5120)
    assert cq.get_unit(5) is None and cq.get_unit(7) == (5000, 120, 9)


def test_gap_is_filled_across_files(tmp_path, caplog):
    cq = fresh(tmp_path)
    fill(cq, 2)
    cq.put(req(8, 9000))
    assert "gap" in caplog.text
    assert cq.max_offset() == 9
    assert [u[0] for u in cq.iter_units(0, 100)] == [0, 1, 8]
    assert all(cq.get_unit(i) is None for i in range(2, 8))
    cq.close()
    assert file_bytes(cq, 0)[2 * UNIT:] == FILLER * 3
    assert file_bytes(cq, FILE_SIZE)[:3 * UNIT] == FILLER * 3
    cq = fresh(tmp_path)
    assert [u[0] for u in cq.iter_units(0, 100)] == [0, 1, 8]


def test_duplicate_dispatch_is_skipped(tmp_path, caplog):
    cq = fresh(tmp_path)
    fill(cq, 6)
    before = [cq.get_unit(i) for i in range(6)]
    cq.put(req(2, 1200, 100, tags=2))  # identical unit: re-dispatch after abnormal recovery
    cq.put(req(3, 1100, 100, tags=77))  # differs but below max_physic_offset: repeat
    assert [cq.get_unit(i) for i in range(6)] == before
    assert "repeatedly" in caplog.text
    cq.put(req(4, 99_999, 10))  # conflicting: logged, never overwritten
    assert "already holds" in caplog.text
    assert [cq.get_unit(i) for i in range(6)] == before and cq.max_offset() == 6
    assert cq.max_physic_offset == 1600


# -- recovery -------------------------------------------------------------------------------
def test_recover_after_reopen(tmp_path):
    cq = fresh(tmp_path)
    fill(cq, 23)
    cq.flush()
    cq.close()
    cq = fresh(tmp_path)
    assert (cq.min_offset(), cq.max_offset(), cq.max_physic_offset) == (0, 23, 1000 + 23 * 100)
    last = cq.mfq.last_file
    assert last.file_from_offset == 20 * UNIT
    assert last.wrote_position == last.flushed_position == 3 * UNIT
    fill(cq, 4, start=23)  # appending continues at the recovered position
    cq.close()
    cq = fresh(tmp_path)
    assert cq.max_offset() == 27
    assert list(cq.iter_units(0, 100)) == [(i, 1000 + i * 100, 100, i) for i in range(27)]


def test_recover_cuts_garbage_after_a_zero_unit(tmp_path):
    cq = fresh(tmp_path)
    fill(cq, 7)
    cq.close()
    path = os.path.join(cq.directory, f"{FILE_SIZE:020d}")
    with open(path, "r+b") as fh:  # torn write: unit 6 lost, a page holding unit 8 made it
        fh.seek(1 * UNIT)
        fh.write(bytes(UNIT))
        fh.seek(3 * UNIT)
        fh.write(struct.pack(">qiq", 7777, 10, 0))
    cq = fresh(tmp_path)
    assert cq.max_offset() == 6 and cq.max_physic_offset == 1600
    cq.close()
    with open(path, "rb") as fh:
        assert fh.read()[UNIT:] == bytes(FILE_SIZE - UNIT)


def test_recover_drops_files_after_the_first_invalid_unit(tmp_path):
    cq = fresh(tmp_path)
    fill(cq, 12)
    cq.close()
    with open(os.path.join(cq.directory, f"{FILE_SIZE:020d}"), "r+b") as fh:
        fh.seek(2 * UNIT)
        fh.write(bytes(3 * UNIT))
    cq = fresh(tmp_path)
    assert cq.max_offset() == 7
    assert sorted(os.listdir(cq.directory)) == [f"{0:020d}", f"{FILE_SIZE:020d}"]


# -- truncation -----------------------------------------------------------------------------
def test_truncate_dirty_then_reopen(tmp_path):
    cq = fresh(tmp_path)
    fill(cq, 23)
    cq.truncate_dirty(1000 + 12 * 100)
    assert cq.max_offset() == 12 and cq.max_physic_offset == 1000 + 12 * 100
    assert cq.get_unit(12) is None and cq.get_unit(11) == (2100, 100, 11)
    cq.close()
    assert sorted(os.listdir(cq.directory)) == [f"{i * FILE_SIZE:020d}" for i in range(3)]
    assert file_bytes(cq, 2 * FILE_SIZE)[2 * UNIT:] == bytes(3 * UNIT)
    cq = fresh(tmp_path)
    assert cq.max_offset() == 12
    fill(cq, 3, start=12, phy0=5000)  # re-dispatch after the cut writes at the cut
    assert cq.get_unit(12) == (5000 + 1200, 100, 12)


def test_truncate_on_a_file_boundary_and_everything(tmp_path):
    cq = fresh(tmp_path)
    fill(cq, 12)
    cq.truncate_dirty(1000 + 10 * 100)
    assert cq.max_offset() == 10 and len(cq.mfq) == 2
    cq.truncate_dirty(0)
    assert cq.max_offset() == 0 and len(cq.mfq) == 0 and cq.max_physic_offset == 0
    cq.put(req(3, 50))
    assert cq.min_offset() == 3 and cq.max_offset() == 4


def test_truncate_keeps_fillers_before_the_cut(tmp_path):
    cq = fresh(tmp_path)
    fill(cq, 2)
    cq.put(req(4, 5000))
    cq.truncate_dirty(5000)
    assert cq.max_offset() == 4 and cq.max_physic_offset == 1200


class FailUnlink(FileIO):
    def _check(self, op: str, path: str) -> None:
        if op == "unlink":
            raise OSError(errno.EIO, "injected", path)


def test_truncate_interrupted_by_a_crash_is_redone_by_recovery(tmp_path):
    cq = fresh(tmp_path, io=FailUnlink())
    fill(cq, 23)
    cq.flush()
    with pytest.raises(OSError):
        cq.truncate_dirty(1000 + 12 * 100)  # tail zeroed and synced, deletions fail
    cq2 = fresh(tmp_path)  # "restart": recovery then truncate_dirty(commitlog end)
    cq2.truncate_dirty(1000 + 12 * 100)
    assert cq2.max_offset() == 12
    assert [u[0] for u in cq2.iter_units(0, 100)] == list(range(12))
    assert len(os.listdir(cq2.directory)) == 3


# -- retention ------------------------------------------------------------------------------
def test_delete_expired_files_and_min_offset(tmp_path):
    cq = fresh(tmp_path)
    fill(cq, 23)
    assert cq.delete_expired_files(1000 + 12 * 100) == 2
    assert cq.min_offset() == 12 and cq.get_unit(11) is None
    assert cq.iter_units(0, 1).__next__()[0] == 12
    assert cq.delete_expired_files(10**9) == 2  # never the last file
    assert len(cq.mfq) == 1 and cq.min_offset() == cq.max_offset() == 23
    cq.close()
    cq = fresh(tmp_path)
    cq.correct_min_offset(1000 + 21 * 100)
    assert cq.min_offset() == 21


def test_held_file_is_deleted_on_a_later_call(tmp_path):
    cq = fresh(tmp_path)
    fill(cq, 12)
    first = cq.mfq.first_file
    assert first.hold()
    assert cq.delete_expired_files(10**9, now_ms=1000, interval_forcibly_ms=500) == 0
    assert cq.get_unit(0) is None  # going away: readers no longer get it
    assert cq.delete_expired_files(10**9, now_ms=1600, interval_forcibly_ms=500) == 2


# -- time lookup ----------------------------------------------------------------------------
def test_offset_for_timestamp_examples(tmp_path):
    cq = fresh(tmp_path)
    times = {}
    for i in range(12):
        phy = 1000 + i * 100
        times[phy] = 10_000 + i * 10
        cq.put(req(i, phy))
    look = lambda phy, size: times.get(phy)  # noqa: E731
    assert cq.offset_for_timestamp(0, look) == 0
    assert cq.offset_for_timestamp(10_050, look) == 5
    assert cq.offset_for_timestamp(10_051, look) == 6
    assert cq.offset_for_timestamp(99_999, look) == 12
    del times[1000], times[1100]  # gone from the commitlog: too old
    assert cq.offset_for_timestamp(0, look) == 2


@SETTINGS
@given(gaps=st.lists(st.integers(0, 3), min_size=1, max_size=40),
       deltas=st.lists(st.integers(0, 5), min_size=40, max_size=40),
       first=st.integers(0, 12), gone=st.integers(0, 5),
       queries=st.lists(st.integers(-5, 300), min_size=1, max_size=10))
def test_oracle_index_and_time(tmp_path_factory, gaps, deltas, first, gone, queries):
    root = tmp_path_factory.mktemp("cq")
    cq = fresh(root)
    index, phy, ts = first, 1000, 0
    oracle: dict[int, tuple[int, int, int]] = {}
    times: dict[int, int] = {}
    for gap, delta in zip(gaps, deltas):
        index += gap
        ts += delta
        oracle[index] = (phy, 10 + gap, -index)
        times[phy] = ts
        cq.put(req(index, phy, 10 + gap, -index))
        phy += 10 + gap
        index += 1
    assert cq.min_offset() == min(oracle) and cq.max_offset() == index
    for i in range(index + 2):
        assert cq.get_unit(i) == oracle.get(i)
    assert list(cq.iter_units(0, 1000)) == [(i, *u) for i, u in sorted(oracle.items())]
    start = first + len(oracle) // 2
    assert list(cq.iter_units(start, 3)) == [
        (i, *u) for i, u in sorted(oracle.items()) if i >= start][:3]
    # The first `gone` records are no longer in the commitlog: older than any timestamp.
    units = sorted(oracle.items())
    gone_phys = {u[0] for _, u in units[:gone]}
    eff = [float("-inf") if u[0] in gone_phys else times[u[0]] for _, u in units]
    look = lambda p, s: None if p in gone_phys else times[p]  # noqa: E731
    for q in queries:
        k = bisect.bisect_left(eff, q)
        expected = units[k][0] if k < len(units) else index
        assert cq.offset_for_timestamp(q, look) == expected
    cq.close()


# -- the store ------------------------------------------------------------------------------
def test_store_dispatch_load_and_cross_queue_operations(tmp_path):
    store = ConsumeQueueStore(str(tmp_path), FILE_SIZE, FileIO())
    store.load()
    store.dispatch(req(0, 0, topic="A", qid=0))
    store.dispatch(req(0, 100, topic="A", qid=1))
    store.dispatch(req(1, 200, topic="A", qid=0))
    store.dispatch(req(0, 300, topic="B", qid=3))
    store.dispatch(req(1, 400, topic="B", qid=3, sys_flag=PREPARED))  # never dispatched
    assert store.topics() == ["A", "B"]
    assert store.find("B", 3).max_offset() == 1 and store.find("C", 0) is None
    assert store.max_physic_offset() == 400
    store.flush()
    store.close()

    store = ConsumeQueueStore(str(tmp_path), FILE_SIZE, FileIO())
    store.load()
    store.recover()
    assert {(q.topic, q.queue_id, q.max_offset()) for q in store.queues()} == {
        ("A", 0, 2), ("A", 1, 1), ("B", 3, 1)}
    assert store.max_physic_offset() == 400
    store.truncate_dirty(150)
    assert store.max_physic_offset() == 200
    assert store.find("A", 0).max_offset() == 1 and store.find("B", 3).max_offset() == 0
    assert store.get_or_create("A", 0) is store.find("A", 0)
    store.remove_topic("B")
    assert store.topics() == ["A"] and not os.path.exists(tmp_path / "B")
    assert store.delete_expired(10**9) == 0  # single files are never deleted
    store.close()


_STEPS = st.lists(st.tuples(st.sampled_from([("A", 0), ("A", 1), ("B", 0)]),
                            st.integers(1, 9),  # run length
                            st.sampled_from(["next", "next", "next", "gap", "repeat"]),
                            st.booleans(),  # a prepared record inside the run
                            st.booleans()),  # two records of the run out of order
                  min_size=1, max_size=12)


@settings(SETTINGS, max_examples=150)
@given(steps=_STEPS)
def test_dispatch_many_writes_what_one_at_a_time_writes(tmp_path_factory, steps):
    """Runs of records for one queue go through ConsumeQueue.put_run (packed in one write when
    they follow the last unit and fit the file); the files and offsets must be those of
    dispatching every record alone, across file ends, gaps and repeats before a run, records
    out of order inside one and prepared records."""
    requests, next_index, phy = [], {}, 0
    for key, length, kind, prepared, swap in steps:
        index = next_index.get(key, 0)
        if kind == "gap":
            index += 2
        elif kind == "repeat":
            index = max(0, index - 1)
        start = len(requests)
        for i in range(length):
            flag = PREPARED if prepared and i == length // 2 else 0
            requests.append(req(index, phy, 100, tags=phy, topic=key[0], qid=key[1],
                                sys_flag=flag))
            phy += 100
            if not flag:
                index += 1
        if swap and length >= 3:  # offsets n, n+2, n+1: the first and last still line up
            a, b = requests[start + 1], requests[start + 2]
            a.consume_queue_offset, b.consume_queue_offset = (b.consume_queue_offset,
                                                              a.consume_queue_offset)
        next_index[key] = max(next_index.get(key, 0), index)
    roots = [tmp_path_factory.mktemp("many"), tmp_path_factory.mktemp("one")]
    stores = [ConsumeQueueStore(str(r), 8 * UNIT, FileIO()) for r in roots]  # runs of 1-9
    for store in stores:
        store.load()
    stores[0].dispatch_many(requests)
    for r in requests:
        stores[1].dispatch(r)
    try:
        seen = [{(q.topic, q.queue_id): (q.min_offset(), q.max_offset(), q.max_physic_offset)
                 for q in store.queues()} for store in stores]
        assert seen[0] == seen[1]
        for q in stores[1].queues():
            twin = stores[0].find(q.topic, q.queue_id)
            for mf in q.mfq.snapshot():
                assert file_bytes(twin, mf.file_from_offset) == file_bytes(q, mf.file_from_offset)
    finally:
        for store in stores:
            store.close()


def test_readers_run_while_reput_writes(tmp_path):
    cq = fresh(tmp_path)
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        try:
            while not done.is_set():
                seen = [u[0] for u in cq.iter_units(0, 10_000)]
                assert seen == list(range(len(seen)))
                assert cq.max_offset() >= cq.min_offset()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    fill(cq, 300)
    done.set()
    t.join()
    assert not errors
    assert cq.max_offset() == 300


def test_truncate_and_retention_scan_across_read_chunks(tmp_path):
    cq = fresh(tmp_path, file_size=5000 * UNIT)  # files wider than one 4096-unit read
    fill(cq, 9000, size=10)
    cq.truncate_dirty(1000 + 100 * 10)
    assert cq.max_offset() == 100 and cq.max_physic_offset == 1000 + 100 * 10
    fill(cq, 8900, start=100, size=10)
    assert cq.delete_expired_files(1000 + 4999 * 10) == 0  # unit 4999 is the last of file 0
    assert cq.delete_expired_files(1000 + 5000 * 10) == 1
    assert cq.min_offset() == 5000


def test_huge_queue_offset_from_a_damaged_record_does_not_fill_millions_of_units(tmp_path):
    from store.queue.consume_queue import ConsumeQueue
    from store.codec.dispatch import DispatchRequest
    from store.commitlog.fileio import FileIO

    cq = ConsumeQueue("T", 0, str(tmp_path), 20 * 8, FileIO())
    cq.load()

    def req(qo: int, phy: int) -> DispatchRequest:
        return DispatchRequest("T", 0, phy, 100, 0, 1, qo, "", None, 0, 0, "")

    cq.put(req(0, 0))
    cq.put(req(1 << 40, 100))  # a flipped bit in the queue offset field
    assert cq.max_offset() == 2
    assert len(os.listdir(os.path.join(str(tmp_path), "T", "0"))) == 1

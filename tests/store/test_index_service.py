"""IndexService: dispatch rules, rolling, query across files, retention, truncation, abnormal
exit, and an oracle check against a dict of lists."""
from __future__ import annotations

import os
import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.clock import ManualClock
from store.codec.dispatch import DispatchRequest
from store.commitlog.fileio import FileIO
from store.index.index_file import index_key_hash
from store.index.index_service import IndexService
from store.layout import INDEX_DIR

T0 = 1_700_000_000_000
ALL = (0, 2**62)
PREPARED, ROLLBACK, COMMIT = 0x4, 0xC, 0x8
# Keys with pairwise distinct index hashes: the index stores only hashes, so colliding keys
# would (correctly) return each other's offsets and break the dict oracle.
KEYS = [f"key{i}" for i in range(40)]
assert len({index_key_hash(f"T#{k}") for k in KEYS}) == len(KEYS)


def req(phy: int, keys: str = "", uniq: str | None = None, ts: int = T0, topic: str = "T",
        sys_flag: int = 0, size: int = 100) -> DispatchRequest:
    return DispatchRequest(topic, 0, phy, size, 0, ts, 0, keys, uniq, sys_flag, 0, "")


def service(root, slots: int = 4, entries: int = 5, clock: ManualClock | None = None,
            io: FileIO | None = None) -> IndexService:
    svc = IndexService(str(root / INDEX_DIR), slots, entries, io or FileIO(),
                       clock or ManualClock(T0))
    svc.load(True, 0)
    return svc


def test_dispatch_keys_uniq_and_filters(tmp_path):
    svc = service(tmp_path, entries=50)
    svc.dispatch(req(0, keys="a  b", uniq="U0"))
    svc.dispatch(req(100, keys="b", topic="Other"))
    svc.dispatch(req(200, keys="a", sys_flag=PREPARED))  # not dispatchable
    svc.dispatch(req(300, keys="a", sys_flag=ROLLBACK))  # not dispatchable
    svc.dispatch(req(400, keys="a", sys_flag=COMMIT))
    svc.dispatch(req(500))  # no keys: nothing indexed
    assert svc.query("T", "a", 10, *ALL) == [400, 0]
    assert svc.query("T", "b", 10, *ALL) == [0]
    assert svc.query("Other", "b", 10, *ALL) == [100]
    assert svc.query("T", "U0", 10, *ALL) == [0]
    assert svc.query("T", "", 10, *ALL) == []
    assert svc.files()[-1].index_count == 1 + 5


def test_already_indexed_records_are_skipped(tmp_path):
    svc = service(tmp_path, entries=50)
    for i in range(4):
        svc.dispatch(req(i * 100, keys="k"))
    count = svc.files()[-1].index_count
    for i in range(3):  # re-dispatch after an abnormal restart
        svc.dispatch(req(i * 100, keys="k"))
    assert svc.files()[-1].index_count == count
    svc.dispatch(req(300, keys="k"))  # RocketMQ re-indexes the record at endPhyOffset ...
    assert svc.query("T", "k", 10, *ALL) == [300, 200, 100, 0]  # ... query de-duplicates


def test_rolling_when_full(tmp_path):
    clock = ManualClock(T0)
    svc = service(tmp_path, entries=4, clock=clock)  # 3 entries per file
    for i in range(10):
        svc.dispatch(req(i * 100, keys=f"k{i % 2}", ts=T0 + i * 1000))
    files = svc.files()
    assert len(files) == 4 and [f.index_count for f in files] == [4, 4, 4, 2]
    names = [f.name for f in files]
    assert names == sorted(names) and len(set(names)) == 4  # one clock ms, still ordered
    for prev, cur in zip(files, files[1:]):
        assert cur.begin_phy_offset >= prev.end_phy_offset
        assert cur.begin_timestamp >= prev.end_timestamp
    assert svc.query("T", "k0", 10, *ALL) == [800, 600, 400, 200, 0]
    assert svc.query("T", "k1", 3, *ALL) == [900, 700, 500]
    assert svc.query("T", "k1", 10, T0 + 3000, T0 + 7000) == [700, 500, 300]
    assert svc.query("T", "k1", 10, *ALL, max_phy_offset=700) == [500, 300, 100]
    assert sorted(os.listdir(tmp_path / INDEX_DIR)) == names


def test_delete_expired_never_the_last(tmp_path):
    svc = service(tmp_path, entries=4)
    for i in range(10):
        svc.dispatch(req(i * 100, keys="k", ts=T0 + i * 1000))
    assert svc.delete_expired(500) == 1  # file 1 ends at 200, file 2 at 500
    assert svc.query("T", "k", 20, *ALL) == [900, 800, 700, 600, 500, 400, 300]
    assert svc.delete_expired(10**9) == 2
    assert len(svc.files()) == 1 and svc.query("T", "k", 20, *ALL) == [900]
    assert len(os.listdir(tmp_path / INDEX_DIR)) == 1


def test_flush_returns_end_timestamp_and_abnormal_exit_deletes_newer_files(tmp_path):
    clock = ManualClock(T0)
    svc = service(tmp_path, entries=4, clock=clock)
    assert svc.flush() == 0
    for i in range(6):
        svc.dispatch(req(i * 100, keys="k", ts=T0 + i * 1000))
    checkpoint = svc.flush()
    assert checkpoint == T0 + 5000 and not any(f.dirty for f in svc.files())
    for i in range(6, 12):  # never flushed before the "crash"
        svc.dispatch(req(i * 100, keys="k", ts=T0 + i * 1000))
    assert len(svc.files()) == 4
    svc.close()

    clean = service(tmp_path, entries=4)
    assert len(clean.files()) == 4
    clean.close()

    crashed = IndexService(str(tmp_path / INDEX_DIR), 4, 4, FileIO(), ManualClock(T0))
    notes = crashed.load(False, checkpoint)
    assert len(notes) == 2 and len(crashed.files()) == 2
    assert len(os.listdir(tmp_path / INDEX_DIR)) == 2
    assert crashed.query("T", "k", 20, *ALL) == [500, 400, 300, 200, 100, 0]
    for i in range(6, 12):  # re-dispatch rebuilds
        crashed.dispatch(req(i * 100, keys="k", ts=T0 + i * 1000))
    assert crashed.query("T", "k", 20, *ALL) == [i * 100 for i in range(11, -1, -1)]


def test_a_round_flushes_the_sealed_files_and_stamps_the_newest_of_them(tmp_path):
    """The logics flush's rounds: the file being written stays unflushed (a crash deletes it
    whatever was flushed of it), the stamp is the newest full file's end."""
    svc = service(tmp_path, entries=4, clock=ManualClock(T0))
    for i in range(4):  # three entries fill a file; the fourth starts the next
        svc.dispatch(req(i * 100, keys="k", ts=T0 + i * 1000))
    first, current = svc.files()
    assert svc.flush(sealed_only=True) == T0 + 2000
    assert not first.dirty and current.dirty
    assert svc.flush() == T0 + 2000 and not current.dirty  # shutdown: everything
    svc.close()


def test_interrupted_creation_is_removed(tmp_path):
    svc = service(tmp_path)
    svc.dispatch(req(0, keys="k"))
    svc.close()
    (tmp_path / INDEX_DIR / "29991231235959999").write_bytes(b"")
    again = IndexService(str(tmp_path / INDEX_DIR), 4, 5, FileIO(), ManualClock(T0))
    assert len(again.load(True, 0)) == 1 and len(again.files()) == 1


def test_truncate_dirty_then_redispatch_rebuilds_identical_files(tmp_path):
    records_a = [req(i * 100, keys=f"k{i % 3} x", uniq=f"u{i}", ts=T0 + i * 1000)
                 for i in range(14)]
    records_b = [req(700 + i * 50, keys=f"k{i % 2}", ts=T0 + 20_000 + i * 1000)
                 for i in range(5)]
    a = service(tmp_path / "a", slots=8, entries=6)
    for r in records_a:
        a.dispatch(r)
    a.truncate_dirty(700)  # records 7.. are cut from the commitlog
    assert a.query("T", "x", 50, *ALL) == [i * 100 for i in range(6, -1, -1)]
    for r in records_b:
        a.dispatch(r)
    b = service(tmp_path / "b", slots=8, entries=6)
    for r in records_a[:7] + records_b:
        b.dispatch(r)
    for key in ("k0", "k1", "k2", "x", "u3", "u9"):
        assert a.query("T", key, 50, *ALL) == b.query("T", key, 50, *ALL)
    fa, fb = a.files(), b.files()
    assert len(fa) == len(fb)
    a.flush(), b.flush()
    for x, y in zip(fa, fb):
        with open(x.path, "rb") as hx, open(y.path, "rb") as hy:
            assert hx.read() == hy.read()


def test_truncate_everything(tmp_path):
    svc = service(tmp_path, entries=4)
    for i in range(7):
        svc.dispatch(req(i * 100, keys="k", ts=T0 + i * 1000))
    svc.truncate_dirty(0)
    assert svc.files() == [] and os.listdir(tmp_path / INDEX_DIR) == []
    svc.dispatch(req(0, keys="k"))
    assert svc.query("T", "k", 5, *ALL) == [0]


SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(records=st.lists(st.tuples(st.lists(st.sampled_from(KEYS), max_size=3),
                                  st.integers(0, 3)), min_size=1, max_size=40),
       queries=st.lists(st.tuples(st.sampled_from(KEYS), st.integers(1, 8),
                                  st.integers(0, 60), st.integers(0, 60),
                                  st.one_of(st.none(), st.integers(0, 4000))),
                        min_size=1, max_size=12))
def test_oracle_against_dict(tmp_path_factory, records, queries):
    root = tmp_path_factory.mktemp("idx")
    svc = service(root, slots=5, entries=7)
    oracle: dict[str, list[tuple[int, int]]] = {}  # key -> [(phy, ts)] oldest first
    ts = T0
    for n, (keys, step) in enumerate(records):
        ts += step * 1000  # whole seconds: timeDiff keeps them exactly
        phy = n * 100
        svc.dispatch(req(phy, keys=" ".join(keys), ts=ts))
        for k in dict.fromkeys(keys):
            oracle.setdefault(k, []).append((phy, ts))
    for key, max_num, a, b, bound in queries:
        begin, end = T0 + min(a, b) * 1000, T0 + max(a, b) * 1000
        expected = [p for p, t in reversed(oracle.get(key, []))
                    if begin <= t <= end and (bound is None or p < bound)][:max_num]
        assert svc.query("T", key, max_num, begin, end, max_phy_offset=bound) == expected
    svc.close()


def test_query_while_dispatching(tmp_path):
    svc = service(tmp_path, slots=16, entries=64)
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        try:
            while not done.is_set():
                got = svc.query("T", "k", 1000, *ALL)
                assert got == sorted(got, reverse=True) and len(got) == len(set(got))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    for i in range(400):
        svc.dispatch(req(i * 100, keys="k", ts=T0 + i * 1000))
    done.set()
    t.join()
    assert not errors
    assert svc.query("T", "k", 1000, *ALL) == [i * 100 for i in range(399, -1, -1)]


def _file_bytes(svc: IndexService) -> list[bytes]:
    out = []
    for f in svc.files():
        with open(f.path, "rb") as fh:
            out.append(fh.read())
    return out


def test_dispatch_many_writes_the_bytes_of_one_dispatch_per_record(tmp_path):
    """Reput hands a step's records as one batch: across rolled files (5 entries each, two or
    three keys per record, records with no key or not dispatchable) and with a repeat of what
    is already indexed, the files are byte for byte those of one dispatch per record."""
    requests = [req(i * 100, keys="" if i % 5 == 4 else f"k{i % 7}" + ("  x" if i % 3 else ""),
                    uniq=f"U{i}" if i % 4 else None, ts=T0 + i * 1500,
                    sys_flag=PREPARED if i == 9 else 0)
                for i in range(40)]
    steps = [requests[:17], requests[10:]]  # then 10..16 again, like a re-dispatch
    one_by_one = service(tmp_path / "single", entries=5)
    for step in steps:
        for r in step:
            one_by_one.dispatch(r)
    batched = service(tmp_path / "batched", entries=5)
    for step in steps:
        batched.dispatch_many(step)
    assert [f.name for f in batched.files()] == [f.name for f in one_by_one.files()]
    assert len(batched.files()) > 3
    assert _file_bytes(batched) == _file_bytes(one_by_one)
    assert batched.query("T", "U13", 10, *ALL) == [1300]
    one_by_one.close()
    batched.close()

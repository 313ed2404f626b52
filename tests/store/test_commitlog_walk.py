"""CommitLogWalk: the one record-after-record loop (records, BLANK to the next file, typed
stops), over one file, a run of files and the live commitlog."""
from __future__ import annotations

import pytest

from store import codec
from store.commitlog.commitlog_walk import CommitLogWalk, Stop, stop_reason
from tests.store.store_parts import COMMITLOG_FILE, Parts, message


@pytest.fixture
def parts(tmp_path):
    p = Parts(tmp_path)
    p.appends = p.put_all(message(i) for i in range(60))  # several files, each ends in a BLANK
    yield p
    p.close()


def file_bytes(parts, i: int) -> bytearray:
    f = parts.commitlog.queue.snapshot()[i]
    return bytearray(f.view[:f.file_size])


def starts_in(parts, i: int) -> list[int]:
    return [a.wrote_offset for a in parts.appends
            if i * COMMITLOG_FILE <= a.wrote_offset < (i + 1) * COMMITLOG_FILE]


def test_one_file_to_its_blank(parts):
    data = file_bytes(parts, 0)
    walk = CommitLogWalk()
    got = list(walk.file(data, 0, 0, len(data), len(data)))
    assert [o for o, _ in got] == starts_in(parts, 0)
    assert [n for _, n in got] == [a.wrote_bytes for a in parts.appends[:len(got)]]
    last = parts.appends[len(got) - 1]
    assert walk.stop is None and walk.offset == COMMITLOG_FILE  # done: go on in the next file
    assert walk.blank_at == last.end_offset and walk.blank_size == COMMITLOG_FILE - last.end_offset


def test_limit_until_and_typed_stops(parts):
    data = file_bytes(parts, 0)
    a = parts.appends
    walk = CommitLogWalk()
    assert len(list(walk.file(data, 0, 0, len(data), len(data), until=a[2].wrote_offset))) == 2
    assert walk.stop is Stop.LIMIT and walk.offset == a[2].wrote_offset
    # a limit inside record 2: the record runs past the readable bytes
    assert len(list(walk.file(data, 0, 0, a[2].wrote_offset + 5, len(data)))) == 2
    assert walk.stop is Stop.NEED_MORE and walk.offset == a[2].wrote_offset
    data[a[1].wrote_offset:a[1].wrote_offset + 8] = bytes(8)
    assert len(list(walk.file(data, 0, 0, len(data), len(data)))) == 1
    assert walk.stop is Stop.EMPTY and walk.offset == a[1].wrote_offset and walk.stop.in_data
    data[a[1].wrote_offset:a[1].wrote_offset + 8] = b"\x00\x00\x00\x60\x12\x34\x56\x78"
    list(walk.file(data, 0, 0, len(data), len(data)))
    assert walk.stop is Stop.CORRUPT and walk.offset == a[1].wrote_offset
    assert stop_reason(data, a[1].wrote_offset, len(data), walk.stop, True).startswith("bad magic")
    assert stop_reason(data, 0, 4, Stop.NEED_MORE, True).startswith("torn record")
    assert stop_reason(bytes(16), 0, 16, Stop.EMPTY, True) == "end of data (zero header)"


def test_crc_is_checked_only_when_asked(parts):
    data = file_bytes(parts, 0)
    a1 = parts.appends[1]
    data[a1.wrote_offset + 100] ^= 0xFF  # a body byte
    assert len(list(CommitLogWalk().file(data, 0, 0, len(data), len(data)))) == len(starts_in(parts, 0))
    walk = CommitLogWalk(check_crc=True)
    assert len(list(walk.file(data, 0, 0, len(data), len(data)))) == 1
    assert walk.stop is Stop.CORRUPT and walk.offset == a1.wrote_offset


def test_a_decode_function_gives_the_values(parts):
    data = file_bytes(parts, 0)
    walk = CommitLogWalk(decode=codec.dispatch_fields)
    got = list(walk.file(data, 0, 0, len(data), len(data)))
    assert [f[0] for _, f in got] == [a.wrote_bytes for a in parts.appends[:len(got)]]
    assert {f[6] for _, f in got} == {"Orders"}
    # decode refusing what check_record calls a record counts as corrupt, never skipped
    refuse = CommitLogWalk(decode=lambda view, pos, limit: None)
    assert list(refuse.file(data, 0, 0, len(data), len(data))) == []
    assert refuse.stop is Stop.CORRUPT and refuse.offset == 0


def test_a_run_of_files_and_a_gap(parts):
    files = parts.commitlog.queue.snapshot()
    run = [(f.file_from_offset, f.view, f.file_size) for f in files]
    done = []
    walk = CommitLogWalk()
    got = [o for o, _ in walk.files(run, file_done=done.append)]
    assert got == [a.wrote_offset for a in parts.appends]
    assert done == [f.file_from_offset + f.file_size for f in files[:-1]]
    assert walk.stop is Stop.EMPTY and walk.offset == parts.commitlog.max_offset()
    walk = CommitLogWalk()
    got = [o for o, _ in walk.files(run[:1] + run[2:])]
    assert got == starts_in(parts, 0)
    assert walk.stop is Stop.GAP and walk.gap == (COMMITLOG_FILE, 2 * COMMITLOG_FILE)
    assert walk.offset == COMMITLOG_FILE


def test_again_looks_a_second_time_at_a_data_stop(parts):
    data = file_bytes(parts, 0)
    a1 = parts.appends[1]
    saved = bytes(data[a1.wrote_offset:a1.wrote_offset + 8])
    data[a1.wrote_offset:a1.wrote_offset + 8] = b"\x00\x00\x00\x60\x12\x34\x56\x78"
    asked = []

    def again(offset, stop):  # the writer finishes the record meanwhile
        asked.append((offset, stop))
        data[a1.wrote_offset:a1.wrote_offset + 8] = saved
        return True

    walk = CommitLogWalk()
    got = [o for o, _ in walk.files([(0, data, len(data))], again=again)]
    assert got == starts_in(parts, 0) and asked == [(a1.wrote_offset, Stop.CORRUPT)]


def test_the_live_commitlog_with_a_break_and_a_bound(parts):
    queue, a = parts.commitlog.queue, parts.appends
    walk = CommitLogWalk()
    records = walk.mapped(queue, 0, parts.commitlog.max_offset())
    for offset, _ in records:
        if offset == a[12].wrote_offset:
            break
    records.close()
    assert walk.offset == a[12].wrote_offset  # the record the caller stopped at
    assert all(f._refs == 1 for f in queue.snapshot())  # every hold released
    walk = CommitLogWalk()
    got = [o for o, _ in walk.mapped(queue, a[12].wrote_offset, a[20].wrote_offset + 3)]
    assert got == [x.wrote_offset for x in a[12:20]]
    assert walk.stop is Stop.NEED_MORE and walk.offset == a[20].wrote_offset
    walk = CommitLogWalk()
    got = [o for o, _ in walk.mapped(queue, 0, parts.commitlog.max_offset(), until=a[3].wrote_offset)]
    assert len(got) == 3 and walk.stop is Stop.LIMIT and walk.offset == a[3].wrote_offset
    walk = CommitLogWalk()
    assert [o for o, _ in walk.mapped(queue, 0, parts.commitlog.max_offset())] == [x.wrote_offset for x in a]
    assert walk.stop is Stop.LIMIT and walk.offset == parts.commitlog.max_offset()
    walk = CommitLogWalk()
    assert list(walk.mapped(queue, 50 * COMMITLOG_FILE, 60 * COMMITLOG_FILE)) == []
    assert walk.stop is Stop.NO_FILE

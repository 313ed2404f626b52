from __future__ import annotations

import os

import pytest

from store import codec
from common.clock import ManualClock
from store.codec import Message, SysFlag
from store.commitlog.commitlog import CommitLog
from store.codec.dispatch import dispatch_hint
from store.errors import CreateFileError, DiskError, OffsetOutOfRange
from store.commitlog.fileio import FileIO
from store.layout import COMMITLOG_DIR
from store.commitlog import mapped_file
from store.commitlog.mapped_file_queue import MappedFileQueue
from tests.faults import EIO, ENOSPC, FaultyFileIO

FILE = 4096


def new_log(tmp_path, io=None, mmap=True) -> CommitLog:
    return CommitLog(str(tmp_path / COMMITLOG_DIR), FILE, io or FileIO(), ManualClock(),
                     write_through_mmap=mmap, store_host="10.0.0.5:10911")


def rec(topic="T", qid=0, body=b"x" * 300, sys_flag=0, **props):
    return codec.encode(Message(topic, body, qid, dict(props), sys_flag=sys_flag,
                                store_host="10.0.0.5:10911")), topic, qid


def records_in(log: CommitLog):
    out = []
    for f in log.files():
        pos = 0
        while pos < f.read_position:
            res = codec.decode(f.view, pos, f.read_position)
            if isinstance(res, codec.Blank):
                out.append(("BLANK", f.file_from_offset + pos, res.size))
                break
            if not isinstance(res, codec.MessageRecord):
                break
            out.append((res.topic, res.physical_offset, res.queue_offset))
            pos += res.total_size
    return out


@pytest.mark.parametrize("mmap", [True, False])
def test_put_assigns_offsets_and_rolls_with_blank(tmp_path, mmap):
    log = new_log(tmp_path, mmap=mmap)
    results = [log.put(*rec(qid=i % 2)) for i in range(30)]
    log.queue.commit()
    assert [r.queue_offset for r in results] == [i // 2 for i in range(30)]
    # physical offsets are contiguous except where a file ended with a BLANK
    for a, b in zip(results, results[1:]):
        assert b.wrote_offset == a.end_offset or b.wrote_offset % FILE == 0
    seen = records_in(log)
    blanks = [s for s in seen if s[0] == "BLANK"]
    assert blanks and all((off + size) % FILE == 0 for _, off, size in blanks)
    assert [s[1] for s in seen if s[0] != "BLANK"] == [r.wrote_offset for r in results]
    assert results[3].msg_id == codec.offset_msg_id("10.0.0.5", 10911, results[3].wrote_offset)
    assert sorted(os.listdir(tmp_path / COMMITLOG_DIR))[0] == "00000000000000000000"


def test_prepared_and_rollback_get_queue_offset_zero_and_do_not_advance(tmp_path):
    log = new_log(tmp_path)
    a = log.put(*rec())
    p = log.put(*rec(sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE))
    r = log.put(*rec(sys_flag=SysFlag.TRANSACTION_ROLLBACK_TYPE))
    b = log.put(*rec())
    assert (a.queue_offset, p.queue_offset, r.queue_offset, b.queue_offset) == (0, 0, 0, 1)
    assert codec.decode(log.read(p.wrote_offset, p.wrote_bytes)).queue_offset == 0


def test_batch_is_one_append_and_all_or_nothing(tmp_path):
    io = FaultyFileIO()
    log = new_log(tmp_path, io)
    log.put(*rec())
    batch = [rec(qid=1) for _ in range(30)]  # needs several more files
    io.fail("preallocate", ENOSPC, times=None)
    before = log.max_wrote_offset()
    with pytest.raises(CreateFileError):
        log.put_batch(batch)
    assert log.max_wrote_offset() == before  # nothing of the batch was written
    assert log.topic_queue_table.get(("T", 1)) is None
    io.heal()
    res = log.put_batch(batch)
    assert [r.queue_offset for r in res] == list(range(30))
    assert len({r.store_timestamp for r in res}) == 1


@pytest.mark.parametrize("mmap", [True, False])
def test_a_batch_that_fits_its_file_writes_what_single_puts_write(tmp_path, mmap):
    # put_batch copies a batch that fits the last file in one go and moves the position once;
    # the bytes, offsets and queue offsets are those of the same records put one by one.
    def batch():
        return [rec(qid=1), rec(sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE), rec(qid=1, KEYS="k"),
                rec(qid=2, body=b"y" * 40)]
    one, many = new_log(tmp_path / "one", mmap=mmap), new_log(tmp_path / "many", mmap=mmap)
    singles = [one.put(*r) for _ in range(3) for r in batch()]
    batched = [r for _ in range(3) for r in many.put_batch(batch())]
    assert len(many.files()) == 1  # every batch fitted the first file
    assert [(r.wrote_offset, r.wrote_bytes, r.queue_offset, r.msg_id) for r in batched] == \
        [(r.wrote_offset, r.wrote_bytes, r.queue_offset, r.msg_id) for r in singles]
    assert many.topic_queue_table == one.topic_queue_table
    one.queue.commit()
    many.queue.commit()
    end = singles[-1].end_offset
    assert many.max_offset() == one.max_offset() == end
    assert bytes(many.files()[0].view[:end]) == bytes(one.files()[0].view[:end])


def test_read_and_get_message_and_store_time(tmp_path):
    log = new_log(tmp_path)
    log.clock.advance(5)
    r = log.put(*rec(TAGS="TagA"))
    m = log.get_message(r.wrote_offset)
    assert isinstance(m, codec.MessageRecord) and m.tags == "TagA"
    assert log.store_time_of(r.wrote_offset, r.wrote_bytes) == r.store_timestamp
    with pytest.raises(OffsetOutOfRange):
        log.read(10 * FILE, 10)


def test_a_record_reader_holds_each_file_once_for_its_run(tmp_path):
    """records(): a run of reads across files gives what get_message gives, holds one file at
    a time (moving on releases the last) and nothing once closed; an offset no file has is
    OffsetOutOfRange and leaves nothing held."""
    log = new_log(tmp_path)
    offsets = [log.put(*rec(TAGS=f"t{i}")).wrote_offset for i in range(30)]
    files = log.files()
    assert len(files) >= 3
    idle = [f._refs for f in files]
    with log.records() as records:
        for offset in offsets:
            assert records.get(offset) == log.get_message(offset)
            held = [f._refs - base for f, base in zip(files, idle)]
            assert sorted(held) == [0] * (len(files) - 1) + [1]
            assert held[offsets_file(files, offset)] == 1
        with pytest.raises(OffsetOutOfRange):
            records.get(10 * FILE * len(files))
        assert [f._refs for f in files] == idle
    assert [f._refs for f in files] == idle


def offsets_file(files, offset: int) -> int:
    return next(i for i, f in enumerate(files)
                if f.file_from_offset <= offset < f.file_from_offset + FILE)


def test_read_chunk_never_crosses_a_file(tmp_path):
    log = new_log(tmp_path)
    for _ in range(20):
        log.put(*rec())
    chunk = log.read_chunk(100, 1 << 20)
    assert len(chunk) == FILE - 100
    assert log.read_chunk(log.max_offset(), 100) == b""


def test_append_raw_copies_verbatim_at_the_end_only(tmp_path):
    src = new_log(tmp_path / "a")
    for i in range(20):
        src.put(*rec(qid=i % 3))
    dst = new_log(tmp_path / "b")
    off = 0
    while off < src.max_offset():
        chunk = src.read_chunk(off, 1000)
        dst.append_raw(off, chunk)
        off += len(chunk)
    assert records_in(dst) == records_in(src)
    with pytest.raises(OffsetOutOfRange):
        dst.append_raw(off + 1, b"x")
    with pytest.raises(OffsetOutOfRange):
        dst.append_raw(0, b"x")


def test_append_raw_into_empty_log_mid_file(tmp_path):
    dst = new_log(tmp_path)
    dst.append_raw(FILE * 3 + 100, b"abc")
    assert dst.min_offset() == FILE * 3 and dst.max_offset() == FILE * 3 + 103


def test_truncate_is_crash_safe(tmp_path):
    log = new_log(tmp_path)
    results = [log.put(*rec()) for _ in range(30)]
    log.queue.flush()
    cut = next(r.wrote_offset for r in results[10:] if r.wrote_offset % FILE)
    log.truncate(cut)
    assert log.max_offset() == cut
    log.close()
    # what is on disk past the cut is zeros or gone: a fresh scan cannot see the old tail
    q = MappedFileQueue(str(tmp_path / COMMITLOG_DIR), FILE, FileIO())
    q.load()
    f = q.find_by_offset(cut)
    assert f is not None and not any(f.view[cut - f.file_from_offset:])
    assert q.last_file is f
    q.close()


def test_truncate_on_a_file_boundary_drops_whole_files(tmp_path):
    log = new_log(tmp_path)
    results = [log.put(*rec()) for _ in range(30)]
    cut = next(r.wrote_offset for r in results[5:] if r.wrote_offset % FILE == 0)
    log.truncate(cut)
    assert log.max_offset() == cut
    assert all(int(n) < cut for n in os.listdir(tmp_path / COMMITLOG_DIR))
    r = log.put(*rec())
    assert r.wrote_offset == cut


def test_a_failed_write_moves_nothing_and_leaves_no_dispatch_hint(tmp_path, monkeypatch):
    """The commitlog's batches are written by pwritev (here every append: the threshold is
    off): a write that fails refuses the batch, nothing of it is readable, and reput finds no
    hint for bytes that are not there (the hints are left before the bytes go in)."""
    monkeypatch.setattr(mapped_file, "PWRITE_MIN_BYTES", 0)
    io = FaultyFileIO()
    log = new_log(tmp_path, io)
    log.dispatch_hints = {}
    first = log.put(*rec())
    encoded = []
    for i in range(3):
        record, topic, qid = rec(body=b"%d" % i * 200)
        record.hint = dispatch_hint(Message(topic, b"", qid, {}), record)
        encoded.append((record, topic, qid))
    io.fail("pwrite", EIO, times=1)
    with pytest.raises(DiskError):
        log.put_batch(encoded)
    assert log.max_offset() == first.end_offset and log.dispatch_hints == {}
    again = log.put_batch(encoded)  # the same records go in once the disk answers
    assert [r.wrote_offset for r in again][0] == first.end_offset
    assert sorted(log.dispatch_hints) == [r.wrote_offset for r in again]
    assert len(records_in(log)) == 4

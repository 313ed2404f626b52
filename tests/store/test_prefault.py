"""store/commitlog/prefault.py: the pages ahead of the write position are faulted in, nothing a reader
or recovery sees changes, and a failure only turns the prefault off for that file."""
from __future__ import annotations

import errno

from common.clock import ManualClock
from store.commitlog.commitlog import CommitLog
from store.commitlog.fileio import FileIO
from store.layout import COMMITLOG_DIR
from store.commitlog.prefault import PrefaultService
from tests.faults import FaultyFileIO

FILE = 64 * 1024


def new_log(tmp_path, io=None, mmap=True) -> CommitLog:
    return CommitLog(str(tmp_path / COMMITLOG_DIR), FILE, io or FileIO(), ManualClock(),
                     write_through_mmap=mmap, store_host="10.0.0.5:10911")


def test_the_window_ahead_of_the_writes_is_populated_and_reads_as_zeros(tmp_path):
    log = new_log(tmp_path)
    service = PrefaultService(log.queue, ahead=16 * 1024)
    service.step()  # no file yet: nothing to do
    assert service.populated_bytes == 0
    data = bytes(range(256)) * 8
    log.append_raw(0, data)
    service.step()
    assert service.populated_bytes == 16 * 1024
    service.step()  # the window is full: nothing more until the writes move
    assert service.populated_bytes == 16 * 1024
    f = log.queue.last_file
    assert bytes(f.view[len(data):len(data) + 16 * 1024]) == bytes(16 * 1024)
    log.append_raw(len(data), data)
    service.step()
    assert service.populated_bytes == 16 * 1024 + len(data)  # topped up, not redone
    assert log.read(0, 2 * len(data)) == data * 2
    assert log.max_offset() == 2 * len(data)


def test_the_window_stops_at_the_file_end(tmp_path):
    log = new_log(tmp_path)
    service = PrefaultService(log.queue, ahead=10 * FILE)
    log.append_raw(0, b"x" * 100)
    service.step()
    assert service.populated_bytes == FILE - 100


def test_a_failing_populate_turns_it_off_for_that_file_only(tmp_path):
    io = FaultyFileIO()
    log = new_log(tmp_path, io)
    service = PrefaultService(log.queue, ahead=8 * 1024)
    log.append_raw(0, b"y" * 100)
    io.fail("populate", errno.ENOMEM, times=1)
    service.step()
    assert service.populated_bytes == 0
    io.heal()
    service.step()  # not retried for this file
    assert service.populated_bytes == 0 and io.calls["populate"] == 1
    log.append_raw(100, b"z" * 100)  # the writes fault their pages in themselves
    assert log.read(0, 200) == b"y" * 100 + b"z" * 100


def test_a_log_written_with_pwrite_is_not_populated(tmp_path):
    log = new_log(tmp_path, mmap=False)
    service = PrefaultService(log.queue, ahead=8 * 1024)
    log.append_raw(0, b"w" * 100)
    service.step()
    assert service.populated_bytes == 0


def test_off_with_a_zero_window(tmp_path):
    log = new_log(tmp_path)
    service = PrefaultService(log.queue, ahead=0)
    log.append_raw(0, b"v" * 100)
    service.step()
    assert service.populated_bytes == 0


def test_a_master_skips_rounds_whose_appends_went_by_pwritev(tmp_path):
    """Bulk appends (pwritev) allocate their own pages: a master's round after them populates
    nothing; small appends (copies into the mapping) and a slave (`always`) still get it."""
    from store.commitlog.mapped_file import PWRITE_MIN_BYTES
    log = CommitLog(str(tmp_path / COMMITLOG_DIR), 16 * PWRITE_MIN_BYTES, FileIO(), ManualClock(),
                    store_host="10.0.0.5:10911")
    slave = [False]
    service = PrefaultService(log.queue, ahead=4 * PWRITE_MIN_BYTES, always=lambda: slave[0])
    bulk = b"b" * PWRITE_MIN_BYTES
    log.append_raw(0, bulk)
    assert log.queue.last_file.pwritten_bytes == len(bulk)
    service.step()
    assert service.populated_bytes == 0 and service.skipped_rounds == 1
    end = len(bulk)
    for _ in range(4):  # small appends: copies
        log.append_raw(end, b"s" * 1000)
        end += 1000
    service.step()
    assert service.populated_bytes == 4 * PWRITE_MIN_BYTES
    slave[0] = True  # a slave's catch-up chunks: populated ahead all the same
    log.append_raw(end, bulk)
    service.step()
    assert service.populated_bytes == 4 * PWRITE_MIN_BYTES + len(bulk)  # topped up
    assert service.skipped_rounds == 1
    assert log.read(0, len(bulk)) == bulk

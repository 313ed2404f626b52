"""A SYNC_FLUSH commitlog is written in a range advised MADV_RANDOM (FileIO.advise_access): with
the kernel's large folios a small msync would write back a whole folio. The advice covers the
range a file is written in, from its creation or from where recovery left it, and is taken back
(MADV_NORMAL, readahead for readers) once the writer moves on to the next file. An ASYNC_FLUSH
commitlog keeps the kernel's default. Real files and a real store; the IO records the advice."""
from __future__ import annotations

import mmap
import os

import pytest

from common.clock import ManualClock
from store.commitlog.fileio import FileIO
from tests.faults import FaultyFileIO
from tests.support.small_store import msg, opened


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


class AdviceIO(FaultyFileIO):
    """Records (file name, offset, random) of every advise_access on a commitlog file."""

    def __init__(self) -> None:
        super().__init__()
        self.advice: list[tuple[str, int, bool]] = []

    def advise_access(self, mm, offset: int, random: bool, path: str) -> bool:
        taken = super().advise_access(mm, offset, random, path)
        if os.path.basename(os.path.dirname(path)) == "commitlog":
            assert taken, "the kernel refused the advice"
            self.advice.append((os.path.basename(path), offset, random))
        return taken


def fill_two_files(store) -> None:
    i = 0
    while len(store.commitlog.queue.files) < 2:
        assert store.put_message(msg(i)).ok
        i += 1


def test_a_sync_flush_commitlog_is_advised_random_while_written_and_normal_once_full(tmp_path,
                                                                                      clock):
    io = AdviceIO()
    s = opened(tmp_path, clock, io=io, flush_disk_type="SYNC_FLUSH")
    try:
        fill_two_files(s)
        first, second = (f"{0:020d}", f"{16 * 1024:020d}")
        by_file = {name: [(o, r) for n, o, r in io.advice if n == name] for name in (first, second)}
        assert by_file == {first: [(0, True), (0, False)], second: [(0, True)]}
        assert len(io.advice) == 3
    finally:
        s.shutdown()


def test_recovery_advises_the_file_it_writes_on_from_where_it_left_it(tmp_path, clock):
    s = opened(tmp_path, clock, flush_disk_type="SYNC_FLUSH")
    fill_two_files(s)
    end = s.commitlog.queue.last_file.wrote_position
    s.shutdown()
    io = AdviceIO()
    s = opened(tmp_path, clock, io=io, flush_disk_type="SYNC_FLUSH")
    try:
        # the full first file keeps the default; the second is written on from its end
        assert io.advice == [(f"{16 * 1024:020d}", end, True)]
    finally:
        s.shutdown()


def test_an_async_flush_commitlog_keeps_the_kernels_default(tmp_path, clock):
    io = AdviceIO()
    s = opened(tmp_path, clock, io=io)
    try:
        fill_two_files(s)
        assert io.advice == []
    finally:
        s.shutdown()


def test_the_advice_reaches_the_kernel_and_a_range_past_the_mapping_is_refused(tmp_path):
    path = tmp_path / "f"
    with open(path, "wb") as f:
        f.truncate(4 * mmap.PAGESIZE)
    fd = os.open(path, os.O_RDWR)
    try:
        mm = mmap.mmap(fd, 4 * mmap.PAGESIZE)
        try:
            assert FileIO().advise_access(mm, mmap.PAGESIZE + 10, True, str(path))
            assert FileIO().advise_access(mm, 0, False, str(path))
            assert not FileIO().advise_access(mm, 4 * mmap.PAGESIZE, True, str(path))
        finally:
            mm.close()
    finally:
        os.close(fd)

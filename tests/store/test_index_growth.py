"""Index files grow in fallocated steps (issue 17): a new file takes its header, slots and one
step of entries; each step is reserved before it is mapped; a full disk during a growth is a
CreateFileError that leaves the file consistent and readable, and the next put after space is
freed goes on."""
from __future__ import annotations

import errno
import os

import pytest

import store.index.index_file as index_file
from store.errors import CorruptFile, CreateFileError
from store.commitlog.fileio import FileIO
from store.index.index_file import IndexFile, index_file_size, initial_index_file_size

NAME = "20231114221320000"
T0 = 1_700_000_000_000
SLOTS, NUM, STEP = 8, 100, 10


@pytest.fixture(autouse=True)
def small_step(monkeypatch):
    monkeypatch.setattr(index_file, "GROW_STEP_ENTRIES", STEP)


def put(f: IndexFile, start: int, count: int) -> None:
    for i in range(start, start + count):
        assert f.put_key(f"T#k{i}", 1000 + i, T0 + i)


def test_grows_in_steps_and_reopens(tmp_path):
    path = str(tmp_path / NAME)
    f = IndexFile(path, SLOTS, NUM, FileIO(), create=True)
    assert os.path.getsize(path) == initial_index_file_size(SLOTS, NUM) == 40 + 32 + 10 * 20
    put(f, 1, 25)  # entry numbers start at 1: 26 used, so three steps
    assert os.path.getsize(path) == 40 + 32 + 30 * 20
    assert os.stat(path).st_blocks * 512 >= os.path.getsize(path)  # reserved, not sparse
    assert [f.select_phy_offsets(f"T#k{i}", 4, 0, 2**62) for i in (1, 13, 25)] == \
        [[1001], [1013], [1025]]
    f.flush()
    f.close()
    again = IndexFile(path, SLOTS, NUM, FileIO())
    assert again.index_count == 26 and again.select_phy_offsets("T#k7", 4, 0, 2**62) == [1007]
    put(again, 26, NUM - 26)
    assert again.is_full and os.path.getsize(path) == index_file_size(SLOTS, NUM)
    assert not again.put_key("T#late", 9999, T0)
    again.close()


def test_size_outside_the_steps_is_corrupt(tmp_path):
    (tmp_path / NAME).write_bytes(b"\0" * (initial_index_file_size(SLOTS, NUM) - 20))
    with pytest.raises(CorruptFile):
        IndexFile(str(tmp_path / NAME), SLOTS, NUM, FileIO())


class NoSpace(FileIO):
    """ENOSPC from the growth's posix_fallocate while `full` is set."""

    full = False

    def _check(self, op: str, path: str) -> None:
        if op == "preallocate" and self.full:
            raise OSError(errno.ENOSPC, "No space left on device", path)


def test_no_space_for_a_step_is_a_clean_refusal(tmp_path):
    io = NoSpace()
    f = IndexFile(str(tmp_path / NAME), SLOTS, NUM, io, create=True)
    put(f, 1, STEP - 1)
    io.full = True
    with pytest.raises(CreateFileError, match="No space"):
        f.put_entries([("T#a", 5000, T0 + 50), ("T#b", 5000, T0 + 50)])
    assert f.index_count == STEP  # nothing half-written, the header says so
    io.full = False
    assert f.put_entries([("T#a", 5000, T0 + 50), ("T#b", 5000, T0 + 50)]) == 2
    assert f.select_phy_offsets("T#b", 4, 0, 2**62) == [5000]
    f.close()


def test_full_tmpfs_refuses_growth_without_sigbus(tmp_path, volume, monkeypatch):
    """A real full volume: posix_fallocate says ENOSPC before any page is mapped."""
    step = 1000  # 20 KB: a growth needs new pages
    monkeypatch.setattr(index_file, "GROW_STEP_ENTRIES", step)
    vol = volume(1)
    slots, num = 1000, 200_000
    f = IndexFile(os.path.join(vol, NAME), slots, num, FileIO(), create=True)
    fd = os.open(os.path.join(vol, "filler"), os.O_WRONLY | os.O_CREAT)
    try:  # take what is left
        while True:
            os.write(fd, b"\1" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    with pytest.raises(CreateFileError):
        put(f, 1, step + 5)
    assert f.index_count == step
    os.unlink(os.path.join(vol, "filler"))
    put(f, step, 6)
    assert f.select_phy_offsets(f"T#k{step + 5}", 4, 0, 2**62) == [1000 + step + 5]
    f.close()

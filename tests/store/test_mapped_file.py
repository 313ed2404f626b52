from __future__ import annotations

import os

import pytest

from store.errors import CreateFileError, DiskError
from store.commitlog.fileio import FileIO
from store.layout import offset_file_name
from store.commitlog.mapped_file import PWRITE_MIN_BYTES, MappedFile
from tests.faults import EIO, ENOSPC, FaultyFileIO


def make(tmp_path, io=None, mmap=True, offset=0, size=8192) -> MappedFile:
    return MappedFile(str(tmp_path / offset_file_name(offset)), size, io or FileIO(),
                      write_through_mmap=mmap, create=True)


def test_file_is_preallocated_and_named_by_offset(tmp_path):
    mf = make(tmp_path, offset=16384)
    assert os.path.basename(mf.path) == "00000000000000016384"
    assert mf.file_from_offset == 16384
    st = os.stat(mf.path)
    assert st.st_size == 8192 and st.st_blocks * 512 >= 8192  # blocks really reserved
    mf.close()


@pytest.mark.parametrize("mmap", [True, False])
def test_positions_append_commit_flush(tmp_path, mmap):
    mf = make(tmp_path, mmap=mmap)
    assert mf.append(b"a" * 100) == 0
    assert mf.append(b"b" * 50) == 100
    assert mf.wrote_position == 150
    assert mf.read_position == (150 if mmap else 0)
    mf.commit()
    assert mf.committed_position == 150 and mf.read(90, 20) == b"a" * 10 + b"b" * 10
    assert mf.flush() == 150 and mf.flushed_position == 150
    with open(mf.path, "rb") as f:
        assert f.read(150) == b"a" * 100 + b"b" * 50
    with pytest.raises(ValueError):
        mf.append(b"x" * 9000)
    mf.close()


def test_append_many_is_read_through_the_mapping_and_flushed_by_msync(tmp_path):
    """The commitlog's large appends go in by pwritev: the mapping's readers see them at once
    and msync of the written range makes them durable, as if they had been copied in. Small
    ones are copied into the mapping (no pwrite)."""
    io = FaultyFileIO()
    big = PWRITE_MIN_BYTES
    mf = make(tmp_path, io, size=4 * big)
    assert mf.append_many([b"a" * big], stamp_ms=7) == 0
    assert io.calls.get("pwrite") == 1 and mf.last_modified_ms == 7
    assert mf.append_many([b"b" * 100]) == big  # small: copied into the mapping
    assert io.calls.get("pwrite") == 1
    assert mf.append_many([b"c" * 20, bytearray(b"c" * (big - 20))]) == big + 100
    assert io.calls.get("pwrite") == 2
    end = 2 * big + 100
    assert mf.read_position == mf.committed_position == mf.wrote_position == end
    assert mf.read(big - 10, 20) == b"a" * 10 + b"b" * 10
    assert bytes(mf.view[big + 100:end]) == b"c" * big
    io.fail("msync", EIO, times=1)  # the pwritten range is the mapping's to flush
    with pytest.raises(DiskError):
        mf.flush()
    assert mf.flush() == end
    with open(mf.path, "rb") as f:
        assert f.read(end) == b"a" * big + b"b" * 100 + b"c" * big
    mf.close()


def test_failed_append_many_moves_nothing(tmp_path):
    io = FaultyFileIO()
    big = PWRITE_MIN_BYTES
    mf = make(tmp_path, io, size=4 * big)
    mf.append_many([b"a" * 100])
    io.fail("pwrite", ENOSPC, times=1)
    with pytest.raises(DiskError) as e:
        mf.append_many([b"b" * big])
    assert e.value.cause.errno == ENOSPC
    assert mf.wrote_position == mf.read_position == 100
    assert mf.append_many([b"c" * big]) == 100 and mf.read(100, big) == b"c" * big
    with pytest.raises(ValueError):
        mf.append_many([b"x" * 4 * big])
    mf.close()


def test_least_pages_defers_small_flushes(tmp_path):
    mf = make(tmp_path, size=4096 * 8)
    mf.append(b"x" * 100)
    assert mf.flush(least_pages=2) == 0
    mf.append(b"x" * 4096 * 2)
    assert mf.flush(least_pages=2) == 4096 * 2 + 100
    mf.close()


@pytest.mark.parametrize("op,mmap", [("msync", True), ("fdatasync", False)])
def test_failed_flush_keeps_flushed_position(tmp_path, op, mmap):
    io = FaultyFileIO()
    mf = make(tmp_path, io, mmap=mmap)
    mf.append(b"x" * 100)
    mf.commit()
    io.fail(op, EIO)
    with pytest.raises(DiskError) as e:
        mf.flush()
    assert e.value.cause.errno == EIO
    assert mf.flushed_position == 0
    mf.close()


def test_failed_commit_keeps_bytes_pending(tmp_path):
    io = FaultyFileIO()
    mf = make(tmp_path, io, mmap=False)
    mf.append(b"x" * 100)
    io.fail("pwrite", EIO, times=1)
    with pytest.raises(DiskError):
        mf.commit()
    assert mf.committed_position == 0
    mf.commit()
    assert mf.committed_position == 100 and mf.read(0, 100) == b"x" * 100
    mf.close()


def test_enospc_at_creation_is_a_clean_refusal(tmp_path):
    io = FaultyFileIO()
    io.fail("preallocate", ENOSPC)
    with pytest.raises(CreateFileError) as e:
        make(tmp_path, io)
    assert "No space" in str(e.value)
    assert os.listdir(tmp_path) == []  # nothing half-created left behind


def test_zero_from_is_durable_and_resets_positions(tmp_path):
    mf = make(tmp_path)
    mf.append(b"y" * 3000)
    mf.flush()
    mf.zero_from(1000)
    assert mf.wrote_position == mf.flushed_position == 1000
    with open(mf.path, "rb") as f:
        data = f.read()
    assert data[:1000] == b"y" * 1000 and not any(data[1000:])
    mf.close()


def test_destroy_waits_for_readers_until_forced(tmp_path):
    mf = make(tmp_path)
    assert mf.hold()
    assert not mf.destroy(interval_forcibly_ms=1000, now_ms=0)
    assert os.path.exists(mf.path)
    assert not mf.hold()  # no new readers once shutting down
    assert not mf.destroy(1000, 500)
    assert mf.destroy(1000, 1000)  # forced after the grace period
    assert not os.path.exists(mf.path)


def test_destroy_after_release(tmp_path):
    mf = make(tmp_path)
    mf.hold()
    assert not mf.destroy(10_000, 0)
    mf.release()
    assert mf.destroy(10_000, 1)
    assert not os.path.exists(mf.path)


def test_pwritev_finishes_short_writes_and_splits_at_iov_max(tmp_path, monkeypatch):
    """FileIO.pwritev: a write the kernel takes in part goes on from the byte it stopped at,
    also inside a buffer; more buffers than IOV_MAX go in several calls."""
    import store.commitlog.fileio as fileio
    real, calls = os.pwritev, []

    def at_most_700(fd, views, offset):  # the kernel takes what it wants
        calls.append(len(views))
        return real(fd, [bytes(b"".join(views)[:700])], offset)

    monkeypatch.setattr(fileio.os, "pwritev", at_most_700)
    monkeypatch.setattr(fileio, "_IOV_MAX", 4)
    buffers = [bytes([65 + i]) * (100 + 37 * i) for i in range(10)]
    path = str(tmp_path / "f")
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        assert FileIO().pwritev(fd, buffers + [b""], 3, path) == sum(map(len, buffers))
    finally:
        os.close(fd)
    with open(path, "rb") as f:
        assert f.read() == bytes(3) + b"".join(buffers)
    assert max(calls) == 4 and len(calls) > 3

"""StoreCheckpoint: RocketMQ byte layout, tolerant loading, crash-safe flush."""
from __future__ import annotations

import errno
import os
import struct

import pytest

from store.checkpoint import CHECKPOINT_FILE_SIZE, CheckpointFields, StoreCheckpoint
from store.errors import DiskError
from store.commitlog.fileio import FileIO
from store.layout import CHECKPOINT_FILE

VALUES = (1_700_000_000_123, 1_700_000_000_456, 1_700_000_000_789, 0x1_2345_6789, 987_654_321)
# Hand-assembled from the RocketMQ layout: five big-endian i64 at 0, 8, 16, 24, 32, zeros to 4096.
GOLDEN = struct.pack(">qqqqq", *VALUES) + b"\x00" * (4096 - 40)


class FaultyIO(FileIO):
    """Raises OSError(errno) for the listed operations, optionally only on paths ending in
    `suffix`."""

    def __init__(self, ops: dict[str, int], suffix: str = "") -> None:
        self.ops = ops
        self.suffix = suffix

    def _check(self, op: str, path: str) -> None:
        if op in self.ops and path.endswith(self.suffix):
            err = self.ops[op]
            raise OSError(err, os.strerror(err), path)


def _filled(path: str, io: FileIO | None = None) -> StoreCheckpoint:
    cp = StoreCheckpoint(path, io or FileIO())
    (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
     cp.master_flushed_offset, cp.confirm_phy_offset) = VALUES
    return cp


def test_golden_image_both_ways(tmp_path):
    assert len(GOLDEN) == CHECKPOINT_FILE_SIZE
    assert StoreCheckpoint.encode(*VALUES) == GOLDEN
    assert StoreCheckpoint.decode(GOLDEN) == CheckpointFields(*VALUES)
    assert StoreCheckpoint.decode(GOLDEN).master_flushed_offset == 0x1_2345_6789
    cp = _filled(str(tmp_path / CHECKPOINT_FILE))
    assert cp.encode() == GOLDEN  # on an instance: its attributes, not zeros
    assert cp.fields() == CheckpointFields(*VALUES)


def test_flush_writes_golden_file_and_load_reads_it(tmp_path):
    path = str(tmp_path / CHECKPOINT_FILE)
    _filled(path).flush()
    with open(path, "rb") as f:
        assert f.read() == GOLDEN
    assert not os.path.exists(path + ".tmp")

    loaded = StoreCheckpoint.load(path, FileIO())
    assert loaded.existed and not loaded.damaged and loaded.damage_reason is None
    assert loaded.fields() == CheckpointFields(*VALUES)


def test_load_golden_file_written_by_hand(tmp_path):
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(GOLDEN)
    cp = StoreCheckpoint.load(str(path), FileIO())
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
            cp.master_flushed_offset, cp.confirm_phy_offset) == VALUES


def test_negative_values_round_trip(tmp_path):
    image = StoreCheckpoint.encode(-1, 0, -(1 << 63), (1 << 63) - 1, 5)
    assert image[:8] == b"\xff" * 8
    assert StoreCheckpoint.decode(image) == (-1, 0, -(1 << 63), (1 << 63) - 1, 5)


@pytest.mark.parametrize("bad", [1 << 63, -(1 << 63) - 1, 1.5, "1", True])
def test_encode_rejects_non_i64(bad):
    with pytest.raises(ValueError):
        StoreCheckpoint.encode(bad)


def test_decode_rejects_wrong_size():
    with pytest.raises(ValueError):
        StoreCheckpoint.decode(GOLDEN[:100])
    with pytest.raises(ValueError):
        StoreCheckpoint.decode(GOLDEN + b"\x00")


def test_load_missing_file(tmp_path):
    cp = StoreCheckpoint.load(str(tmp_path / CHECKPOINT_FILE), FileIO())
    assert not cp.existed and not cp.damaged
    assert cp.fields() == CheckpointFields()
    assert cp.min_timestamp() == 0 and cp.min_timestamp_index() == 0


@pytest.mark.parametrize("size", [0, 100, 4095, 4097, 12345])
def test_load_wrong_size_is_damaged_not_fatal(tmp_path, size):
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(os.urandom(size))
    cp = StoreCheckpoint.load(str(path), FileIO())
    assert cp.damaged and not cp.existed
    assert str(size) in cp.damage_reason
    assert cp.fields() == CheckpointFields()
    # A damaged checkpoint can be overwritten with a good one.
    cp.physic_msg_timestamp = 42
    cp.flush()
    again = StoreCheckpoint.load(str(path), FileIO())
    assert again.existed and again.physic_msg_timestamp == 42


def test_load_unreadable_is_damaged_not_fatal(tmp_path):
    path = str(tmp_path / CHECKPOINT_FILE)
    _filled(path).flush()
    cp = StoreCheckpoint.load(path, FaultyIO({"pread": errno.EIO}))
    assert cp.damaged and not cp.existed
    assert "errno 5" in cp.damage_reason
    assert cp.fields() == CheckpointFields()


def test_crash_during_write_leaves_old_values(tmp_path):
    path = str(tmp_path / CHECKPOINT_FILE)
    _filled(path).flush()
    # An earlier crash left a partial tmp file behind ...
    with open(path + ".tmp", "wb") as f:
        f.write(b"\x7f" * 1000)
    assert StoreCheckpoint.load(path, FileIO()).fields() == CheckpointFields(*VALUES)

    # ... and this flush "crashes" before the rename makes the new image visible.
    cp = StoreCheckpoint.load(path, FaultyIO({"rename": errno.EIO}))
    cp.physic_msg_timestamp = 1
    cp.confirm_phy_offset = 2
    with pytest.raises(DiskError) as info:
        cp.flush()
    assert info.value.path == path and info.value.cause.errno == errno.EIO

    with open(path, "rb") as f:
        assert f.read() == GOLDEN
    assert StoreCheckpoint.load(path, FileIO()).fields() == CheckpointFields(*VALUES)

    # A later successful flush replaces both the leftover tmp and the file.
    cp.io = FileIO()
    cp.flush()
    assert StoreCheckpoint.load(path, FileIO()).fields() == CheckpointFields(1, *VALUES[1:4], 2)
    assert not os.path.exists(path + ".tmp")


def test_eio_on_fsync_raises_disk_error_and_keeps_old_file(tmp_path):
    path = str(tmp_path / CHECKPOINT_FILE)
    _filled(path).flush()
    cp = StoreCheckpoint.load(path, FaultyIO({"fsync": errno.EIO}))
    cp.logics_msg_timestamp = 7
    with pytest.raises(DiskError) as info:
        cp.flush()
    assert isinstance(info.value.cause, OSError) and info.value.cause.errno == errno.EIO
    assert "errno 5" in str(info.value)
    with open(path, "rb") as f:
        assert f.read() == GOLDEN


def test_enospc_on_write_raises_disk_error(tmp_path):
    path = str(tmp_path / CHECKPOINT_FILE)
    cp = StoreCheckpoint(path, FaultyIO({"pwrite": errno.ENOSPC}))
    with pytest.raises(DiskError) as info:
        cp.flush()
    assert info.value.cause.errno == errno.ENOSPC
    assert not os.path.exists(path)


def test_min_timestamps():
    cp = StoreCheckpoint("unused")
    cp.physic_msg_timestamp = 10_000
    cp.logics_msg_timestamp = 20_000
    cp.index_msg_timestamp = 30_000
    assert cp.min_timestamp() == 7_000
    assert cp.min_timestamp_index() == 7_000
    cp.index_msg_timestamp = 5_000
    assert cp.min_timestamp_index() == 2_000
    cp.index_msg_timestamp = 1_000
    assert cp.min_timestamp_index() == 0  # clamped
    cp.logics_msg_timestamp = 2_999
    assert cp.min_timestamp() == 0  # clamped

"""RocketMQ's epoch file format (golden bytes both ways, CRC, the list rules) and EpochFile
(backup, fallback, atomic save)."""
from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given, strategies as st

from store.epoch_file import EpochFile, decode_epoch_file, encode_epoch_file
from store.errors import CorruptFile, DiskError
from store.commitlog.fileio import FileIO

# The example of RocketMQ's CheckpointFile javadoc: "2 / 773307083 / 7-7000 / 8-8000".
GOLDEN = b"2\n773307083\n7-7000\n8-8000\n"
GOLDEN_ENTRIES = [(7, 7000), (8, 8000)]


class FailingIO(FileIO):
    """OSError(EIO) for `op` on paths ending with `suffix`."""

    def __init__(self, op: str, suffix: str) -> None:
        self.op, self.suffix = op, suffix

    def _check(self, op: str, path: str) -> None:
        if op == self.op and path.endswith(self.suffix):
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)


# -- file format ----------------------------------------------------------------------------
def test_golden_bytes_both_ways():
    assert encode_epoch_file(GOLDEN_ENTRIES) == GOLDEN
    assert decode_epoch_file(GOLDEN, "p") == GOLDEN_ENTRIES


def test_empty_list_round_trips():
    assert encode_epoch_file([]) == b"0\n0\n"
    assert decode_epoch_file(b"0\n0\n", "p") == []


@given(st.lists(st.tuples(st.integers(1, 1000), st.integers(0, 10**12)), max_size=8))
def test_round_trip(pairs):
    epochs = sorted({e for e, _ in pairs})
    starts = sorted(s for _, s in pairs)[:len(epochs)]
    entries = list(zip(epochs, starts))
    assert decode_epoch_file(encode_epoch_file(entries), "p") == entries


def test_crc_mismatch_detected_and_zero_means_unchecked():
    tampered = GOLDEN.replace(b"8-8000", b"8-8001")
    with pytest.raises(CorruptFile, match="CRC mismatch") as info:
        decode_epoch_file(tampered, "/x/epoch")
    assert "/x/epoch" in str(info.value)
    unchecked = tampered.replace(b"773307083", b"0")
    assert decode_epoch_file(unchecked, "p") == [(7, 7000), (8, 8001)]


def test_missing_final_newline_is_tolerated_like_java():
    assert decode_epoch_file(GOLDEN[:-1], "p") == GOLDEN_ENTRIES


@pytest.mark.parametrize("data, problem", [
    (b"", "expected at least 2"),
    (b"2\n", "expected at least 2"),
    (b"x\n0\n", "bad header"),
    (b"3\n0\n7-7000\n8-8000\n", "header says 3 entries"),
    (b"1\n0\n7:7000\n", "not 'epoch-startOffset'"),
    (b"1\n0\n-7-7000\n", "not 'epoch-startOffset'"),
    (b"1\n0\n0-7000\n", "epoch 0"),
    (b"2\n0\n8-8000\n7-9000\n", "strictly increase"),
    (b"2\n0\n7-8000\n8-7000\n", "never decrease"),
    (b"1\n0\n\xff\n", "not ASCII"),
])
def test_malformed_files_are_corrupt(data, problem):
    with pytest.raises(CorruptFile, match=problem):
        decode_epoch_file(data, "p")


# -- EpochFile ---------------------------------------------------------------------------------
def test_missing_file_is_an_empty_list(tmp_path):
    assert EpochFile(str(tmp_path / "epoch")).load() == []


def test_save_load_and_backup_of_the_previous_version(tmp_path):
    path = str(tmp_path / "epoch")
    f = EpochFile(path)
    f.save([(7, 7000)])
    assert not os.path.exists(path + ".bak")
    f.save(GOLDEN_ENTRIES)
    assert open(path, "rb").read() == GOLDEN
    assert decode_epoch_file(open(path + ".bak", "rb").read(), "b") == [(7, 7000)]
    assert f.load() == GOLDEN_ENTRIES


def test_corrupt_main_falls_back_to_backup(tmp_path, caplog):
    path = str(tmp_path / "epoch")
    f = EpochFile(path)
    f.save([(7, 7000)])
    f.save(GOLDEN_ENTRIES)
    with open(path, "wb") as out:
        out.write(b"2\n1\n7-7000\n8-8000\n")
    assert f.load() == [(7, 7000)]
    assert "using the backup" in caplog.text


def test_unreadable_main_falls_back_to_backup(tmp_path):
    path = str(tmp_path / "epoch")
    EpochFile(path).save([(7, 7000)])
    EpochFile(path).save([(7, 7000), (9, 9000)])
    f = EpochFile(path, FailingIO("open_ro", "epoch"))
    assert f.load() == [(7, 7000)]


def test_corrupt_main_and_backup_raise(tmp_path):
    path = str(tmp_path / "epoch")
    for p in (path, path + ".bak"):
        with open(p, "wb") as out:
            out.write(b"garbage")
    with pytest.raises(CorruptFile, match="backup unusable"):
        EpochFile(path).load()
    os.unlink(path + ".bak")
    with pytest.raises(CorruptFile):
        EpochFile(path).load()


def test_corrupt_main_is_not_copied_over_a_good_backup(tmp_path):
    path = str(tmp_path / "epoch")
    f = EpochFile(path)
    f.save([(7, 7000)])
    f.save([(7, 7000), (8, 8000)])
    with open(path, "wb") as out:
        out.write(b"garbage")
    f.save([(7, 7000), (8, 8000), (9, 9000)])
    assert decode_epoch_file(open(path + ".bak", "rb").read(), "b") == [(7, 7000)]


def test_failed_save_raises_disk_error_and_keeps_old_content(tmp_path):
    path = str(tmp_path / "epoch")
    EpochFile(path).save([(7, 7000)])
    with pytest.raises(DiskError):
        EpochFile(path, FailingIO("fsync", "epoch.tmp")).save([(7, 7000), (8, 8000)])
    assert EpochFile(path).load() == [(7, 7000)]


def test_encode_refuses_entries_that_break_the_rules():
    for bad in ([(0, 0)], [(7, -1)], [(8, 8000), (7, 9000)], [(7, 8000), (8, 7000)], [(True, 5)]):
        with pytest.raises(ValueError):
            encode_epoch_file(bad)
    with pytest.raises(ValueError):
        EpochFile("unused").save([(2, 0), (1, 0)])

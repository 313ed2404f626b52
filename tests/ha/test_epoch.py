"""Epoch list rules, RocketMQ's epoch file format, and the consistent-point search."""
from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given, strategies as st

from ha.epoch import (EpochCache, EpochEntry, EpochError, EpochFile, decode_epoch_file,
                      encode_epoch_file, find_consistent_point, resume_offset)
from store.errors import CorruptFile, DiskError
from store.fileio import FileIO

# The example of RocketMQ's CheckpointFile javadoc: "2 / 773307083 / 7-7000 / 8-8000".
GOLDEN = b"2\n773307083\n7-7000\n8-8000\n"
GOLDEN_ENTRIES = [EpochEntry(7, 7000), EpochEntry(8, 8000)]


def cache(*pairs: tuple[int, int]) -> EpochCache:
    return EpochCache(EpochEntry(e, s) for e, s in pairs)


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
    entries = [EpochEntry(e, s) for e, s in zip(epochs, starts)]
    assert decode_epoch_file(encode_epoch_file(entries), "p") == entries


def test_crc_mismatch_detected_and_zero_means_unchecked():
    tampered = GOLDEN.replace(b"8-8000", b"8-8001")
    with pytest.raises(CorruptFile, match="CRC mismatch") as info:
        decode_epoch_file(tampered, "/x/epoch")
    assert "/x/epoch" in str(info.value)
    unchecked = tampered.replace(b"773307083", b"0")
    assert decode_epoch_file(unchecked, "p") == [EpochEntry(7, 7000), EpochEntry(8, 8001)]


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


# -- EpochFile ------------------------------------------------------------------------------
def test_missing_file_is_an_empty_cache(tmp_path):
    assert len(EpochFile(str(tmp_path / "epoch")).load()) == 0


def test_save_load_and_backup_of_the_previous_version(tmp_path):
    path = str(tmp_path / "epoch")
    f = EpochFile(path)
    f.save(cache((7, 7000)))
    assert not os.path.exists(path + ".bak")
    f.save(EpochCache(GOLDEN_ENTRIES))
    assert open(path, "rb").read() == GOLDEN
    assert decode_epoch_file(open(path + ".bak", "rb").read(), "b") == [EpochEntry(7, 7000)]
    assert f.load().entries == tuple(GOLDEN_ENTRIES)


def test_corrupt_main_falls_back_to_backup(tmp_path, caplog):
    path = str(tmp_path / "epoch")
    f = EpochFile(path)
    f.save(cache((7, 7000)))
    f.save(EpochCache(GOLDEN_ENTRIES))
    with open(path, "wb") as out:
        out.write(b"2\n1\n7-7000\n8-8000\n")
    assert f.load().entries == (EpochEntry(7, 7000),)
    assert "using the backup" in caplog.text


def test_unreadable_main_falls_back_to_backup(tmp_path):
    path = str(tmp_path / "epoch")
    EpochFile(path).save(cache((7, 7000)))
    EpochFile(path).save(cache((7, 7000), (9, 9000)))
    f = EpochFile(path, FailingIO("open_ro", "epoch"))
    assert f.load().entries == (EpochEntry(7, 7000),)


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
    f.save(cache((7, 7000)))
    f.save(cache((7, 7000), (8, 8000)))
    with open(path, "wb") as out:
        out.write(b"garbage")
    f.save(cache((7, 7000), (8, 8000), (9, 9000)))
    assert decode_epoch_file(open(path + ".bak", "rb").read(), "b") == [EpochEntry(7, 7000)]


def test_failed_save_raises_disk_error_and_keeps_old_content(tmp_path):
    path = str(tmp_path / "epoch")
    EpochFile(path).save(cache((7, 7000)))
    with pytest.raises(DiskError):
        EpochFile(path, FailingIO("fsync", "epoch.tmp")).save(cache((7, 7000), (8, 8000)))
    assert EpochFile(path).load().entries == (EpochEntry(7, 7000),)


# -- EpochCache -----------------------------------------------------------------------------
def test_append_rules():
    c = EpochCache()
    assert c.last is None and c.last_epoch == 0
    c.append(1, 0)
    c.append(2, 100)
    c.append(3, 100)  # an epoch that wrote nothing
    assert c.last == EpochEntry(3, 100) and c.last_epoch == 3 and len(c) == 3
    for epoch, start in [(3, 200), (2, 300), (4, 99), (0, 0), (5, -1), (True, 500)]:
        with pytest.raises(EpochError):
            c.append(epoch, start)
    assert len(c) == 3
    with pytest.raises(EpochError):
        cache((2, 0), (1, 10))


def test_lookups():
    c = cache((1, 50), (2, 100), (3, 100), (5, 400))
    assert c.entry_at(49) is None
    assert c.entry_at(50) == EpochEntry(1, 50)
    assert c.entry_at(99) == EpochEntry(1, 50)
    assert c.entry_at(100) == EpochEntry(3, 100)  # epoch 2 is empty
    assert c.entry_at(10**9) == EpochEntry(5, 400)
    assert c.end_of(1, 500) == 100
    assert c.end_of(2, 500) == 100
    assert c.end_of(3, 500) == 400
    assert c.end_of(5, 500) == 500
    assert c.end_of(4, 500) is None
    assert c.next_boundary_after(0) == 50
    assert c.next_boundary_after(50) == 100
    assert c.next_boundary_after(100) == 400
    assert c.next_boundary_after(400) is None


def test_truncate_from_drops_entries_starting_at_or_after_the_cut():
    c = cache((1, 0), (2, 100), (3, 200))
    assert c.truncate_from(101)
    assert c.entries == (EpochEntry(1, 0), EpochEntry(2, 100))
    assert not c.truncate_from(101)
    assert c.truncate_from(100)  # epoch 2 covers no bytes any more
    assert c.entries == (EpochEntry(1, 0),)
    c.append(4, 99)


def test_copy_is_independent():
    c = cache((1, 0))
    d = c.copy()
    d.append(2, 10)
    assert len(c) == 1 and len(d) == 2


# -- consistent point -----------------------------------------------------------------------
@pytest.mark.parametrize("local, local_max, remote, remote_max, expected", [
    # identical histories
    ([(1, 0), (2, 100)], 300, [(1, 0), (2, 100)], 300, 300),
    # slave behind in the same epoch
    ([(1, 0), (2, 100)], 150, [(1, 0), (2, 100)], 300, 150),
    # old master rejoining with a tail in epoch 1 that the new master ended earlier
    ([(1, 0)], 150, [(1, 0), (2, 100)], 300, 100),
    # master ahead by several epochs
    ([(1, 0), (2, 100)], 120, [(1, 0), (2, 100), (3, 200), (4, 250), (6, 900)], 1000, 120),
    # no common epoch
    ([(2, 0)], 100, [(1, 0), (3, 50)], 100, None),
    ([], 0, [(1, 0)], 100, None),
    # same epoch number, different start: keep scanning down
    ([(1, 0), (3, 120)], 200, [(1, 0), (3, 100)], 300, 100),
    # slave's private later epoch
    ([(1, 0), (2, 100), (4, 180)], 250, [(1, 0), (2, 100), (3, 200)], 300, 180),
])
def test_find_consistent_point(local, local_max, remote, remote_max, expected):
    assert find_consistent_point(cache(*local), local_max, cache(*remote), remote_max) == expected


def test_stale_entry_past_a_cut_log_claims_nothing():
    # the log was cut to 300 but the epoch file still has 2@500 (crash between the two)
    assert find_consistent_point(cache((1, 0), (2, 500)), 300,
                                 cache((1, 0), (2, 500)), 800) == 300


@st.composite
def histories(draw):
    """A master's epoch history, a slave holding a prefix of it, optionally plus a divergent
    tail, and the expected consistent point (the length of the common prefix)."""
    n = draw(st.integers(1, 6))
    epochs = sorted(draw(st.sets(st.integers(1, 50), min_size=n, max_size=n)))
    base = draw(st.integers(0, 1000))
    gaps = [0] + draw(st.lists(st.integers(0, 300), min_size=n - 1, max_size=n - 1))
    starts = [base + sum(gaps[:i + 1]) for i in range(n)]
    master = [EpochEntry(e, s) for e, s in zip(epochs, starts)]
    master_max = starts[-1] + draw(st.integers(0, 300))
    common = draw(st.one_of(st.integers(base, master_max), st.sampled_from(starts)))
    # the slave has every epoch starting before `common`, and maybe some starting at it
    below = sum(1 for s in starts if s < common)
    at = sum(1 for s in starts if s == common)
    j = max(1, below + draw(st.integers(0, at)))
    slave = list(master[:j])
    slave_max = common
    tail = draw(st.sampled_from(["none", "private", "extend"]))
    if tail == "private":  # written as master of an epoch the master never saw
        slave.append(EpochEntry(epochs[-1] + draw(st.integers(1, 5)), common))
        slave_max += draw(st.integers(0, 300))
    elif tail == "extend" and j < n and starts[j] == common:
        slave_max += draw(st.integers(1, 300))  # the master changed epoch at `common`
    return master, master_max, slave, slave_max, common


@given(histories())
def test_consistent_point_is_the_common_prefix(h):
    master, master_max, slave, slave_max, common = h
    assert find_consistent_point(EpochCache(slave), slave_max,
                                 EpochCache(master), master_max) == common
    assert resume_offset(EpochCache(master), master[0].start_offset, master_max,
                         EpochCache(slave), slave_max, slave_empty=False,
                         sync_from_last_file=False, file_size=1024) == common


# -- resume offset --------------------------------------------------------------------------
MASTER = cache((1, 0), (2, 5000))


def test_empty_slave_starts_at_master_min_or_last_file():
    kw = dict(slave_empty=True, file_size=1024)
    assert resume_offset(MASTER, 1000, 5500, EpochCache(), 0, sync_from_last_file=False,
                         **kw) == 1000
    assert resume_offset(MASTER, 1000, 5500, EpochCache(), 0, sync_from_last_file=True,
                         **kw) == 5120
    # the last file starts before the master's min offset
    assert resume_offset(MASTER, 5200, 5500, EpochCache(), 0, sync_from_last_file=True,
                         **kw) == 5200


def test_slave_with_data_resumes_at_the_consistent_point():
    assert resume_offset(MASTER, 0, 6000, cache((1, 0)), 5100, slave_empty=False,
                         sync_from_last_file=True, file_size=1024) == 5000


def test_resume_below_master_min_is_an_error():
    with pytest.raises(EpochError, match="slave would resume at 5000 but the master's log "
                                         "starts at 5500: wipe"):
        resume_offset(MASTER, 5500, 6000, cache((1, 0)), 5100, slave_empty=False,
                      sync_from_last_file=False, file_size=1024)


def test_no_common_epoch_is_an_error():
    with pytest.raises(EpochError, match=r"no common epoch between slave epochs \[3@0\] and "
                                         r"master epochs \[1@0, 2@5000\]"):
        resume_offset(MASTER, 0, 6000, cache((3, 0)), 100, slave_empty=False,
                      sync_from_last_file=False, file_size=1024)
    # data but no epochs: it cannot prove its bytes match
    with pytest.raises(EpochError, match="no common epoch"):
        resume_offset(MASTER, 0, 6000, EpochCache(), 100, slave_empty=False,
                      sync_from_last_file=False, file_size=1024)

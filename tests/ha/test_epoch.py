"""Epoch list rules and the consistent-point search (the epoch file: tests/store/test_epoch_file.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from ha.epoch import EpochCache, EpochEntry, EpochError, find_consistent_point, resume_offset


def cache(*pairs: tuple[int, int]) -> EpochCache:
    return EpochCache(EpochEntry(e, s) for e, s in pairs)


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


def test_from_entries_and_iteration_are_the_epoch_files_pairs():
    c = EpochCache.from_entries([(7, 7000), (8, 8000)])
    assert c.entries == (EpochEntry(7, 7000), EpochEntry(8, 8000))
    assert list(c) == [(7, 7000), (8, 8000)] and list(EpochCache()) == []
    assert EpochCache.from_entries(c).entries == c.entries
    for bad in ([(8, 8000), (7, 9000)], [(7, 8000), (8, 7000)], [(0, 0)]):
        with pytest.raises(EpochError):
            EpochCache.from_entries(bad)


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

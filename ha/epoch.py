"""Epochs: which master term wrote which range of the commitlog, and where a replica resumes.

Every time a broker becomes master it appends an entry (epoch, start_offset): the new epoch
number handed out by the controller and the commitlog offset at which that master writes its
first byte. Epoch e covers [start_offset(e), start_offset(next entry)); the last entry covers
everything up to the replica's max offset. Two replicas that hold the same epoch with the same
start offset hold the same bytes in that epoch (one master wrote them), so comparing epoch
lists finds the longest common prefix of two commitlogs without reading any data.

Rules of an epoch list (checked on every append, and on every load of the file; the rule
functions live with the file format in store.epoch_file):

* epoch >= 1 and start_offset >= 0;
* epochs strictly increase;
* start offsets never decrease. An equal start is allowed (RocketMQ requires strictly larger):
  a master elected and replaced before it wrote anything leaves an epoch with an empty range,
  and `EpochCache.truncate_from` keeps an entry that starts exactly at the cut point.

No I/O here: the epoch file (`epochFileCheckpoint`, RocketMQ's CheckpointFile text format) is
read and written by store.epoch_file.EpochFile as (epoch, start_offset) pairs;
`EpochCache.from_entries` builds a cache from them, and a cache iterates as such pairs.
"""
from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from store.epoch_file import check_entry, check_follows, format_entry
from store.errors import StoreError


class EpochError(StoreError):
    """An epoch entry or list breaks the ordering rules, or replicas share no usable epoch."""


@dataclass(frozen=True, order=True)
class EpochEntry:
    """One master term: its epoch and the commitlog offset of its first byte (checked at
    construction: EpochError)."""

    epoch: int  # >= 1
    start_offset: int  # >= 0, commitlog physical offset of this epoch's first byte

    def __post_init__(self) -> None:
        try:
            check_entry(self.epoch, self.start_offset)
        except ValueError as e:
            raise EpochError(str(e)) from None

    def __str__(self) -> str:
        return format_entry(self.epoch, self.start_offset)

    @property
    def pair(self) -> tuple[int, int]:
        return self.epoch, self.start_offset


def _check_follows(prev: EpochEntry | None, entry: EpochEntry) -> None:
    try:
        check_follows(prev.pair if prev is not None else None, entry.pair)
    except ValueError as e:
        raise EpochError(str(e)) from None


def _format(entries: Sequence[EpochEntry]) -> str:
    return "[" + ", ".join(str(e) for e in entries) + "]"


def _end_in(entries: Sequence[EpochEntry], i: int, max_offset: int) -> int:
    """End of entries[i]: the next start, or max_offset for the last. Clipped to max_offset so
    an entry left behind past the end of a cut log never claims bytes that are not there."""
    end = entries[i + 1].start_offset if i + 1 < len(entries) else max_offset
    return min(end, max_offset)


class EpochCache:
    """Thread-safe (one lock) ordered list of epoch entries; see the module rules."""

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        self._lock = threading.Lock()
        self._entries: list[EpochEntry] = []
        self._starts: list[int] = []  # parallel to _entries, for bisect by offset
        prev: EpochEntry | None = None
        for entry in entries:
            if not isinstance(entry, EpochEntry):
                raise EpochError(f"not an EpochEntry: {entry!r}")
            _check_follows(prev, entry)
            self._entries.append(entry)
            self._starts.append(entry.start_offset)
            prev = entry

    @classmethod
    def from_entries(cls, pairs: Iterable[Sequence[int]]) -> "EpochCache":
        """A cache of (epoch, start_offset) pairs, e.g. store.epoch_file.EpochFile.load()'s.
        EpochError when they break the rules."""
        return cls(EpochEntry(epoch, start) for epoch, start in pairs)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        with self._lock:
            return tuple(self._entries)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """The entries as (epoch, start_offset) pairs: what store.epoch_file.EpochFile.save
        writes."""
        return iter([e.pair for e in self.entries])

    @property
    def last(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def last_epoch(self) -> int:
        last = self.last
        return last.epoch if last is not None else 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __repr__(self) -> str:
        return f"EpochCache({_format(self.entries)})"

    def append(self, epoch: int, start_offset: int) -> None:
        """Add the entry of a new term. EpochError unless epoch > last_epoch and start_offset
        >= the last start (both in range)."""
        entry = EpochEntry(epoch, start_offset)
        with self._lock:
            _check_follows(self._entries[-1] if self._entries else None, entry)
            self._entries.append(entry)
            self._starts.append(start_offset)

    def entry_at(self, offset: int) -> EpochEntry | None:
        """The epoch that wrote `offset`: the last entry starting at or before it (earlier
        entries with the same start cover empty ranges). None if before the first entry."""
        with self._lock:
            i = bisect.bisect_right(self._starts, offset) - 1
            return self._entries[i] if i >= 0 else None

    def end_of(self, epoch: int, max_offset: int) -> int | None:
        """End (exclusive) of `epoch`: the next entry's start, or max_offset for the last entry
        (clipped to max_offset). None if the epoch is not in the list."""
        with self._lock:
            i = self._index_of(epoch)
            return None if i is None else _end_in(self._entries, i, max_offset)

    def next_boundary_after(self, offset: int) -> int | None:
        """Smallest start offset > offset, or None. A transfer chunk starting at `offset` must
        stop there, so that every chunk belongs to exactly one epoch."""
        with self._lock:
            i = bisect.bisect_right(self._starts, offset)
            return self._starts[i] if i < len(self._starts) else None

    def truncate_from(self, offset: int) -> bool:
        """Forget epochs that start at or after `offset`, after a replica's commitlog was cut
        there (RocketMQ's truncateSuffixByOffset): they cover no bytes any more, and the next
        chunk records the epoch its bytes really belong to. Keeping an empty entry at the cut
        would make the slave refuse the master's older epoch for those offsets forever.
        True if anything changed."""
        with self._lock:
            i = bisect.bisect_left(self._starts, offset)
            if i == len(self._entries):
                return False
            del self._entries[i:]
            del self._starts[i:]
            return True

    def copy(self) -> "EpochCache":
        return EpochCache(self.entries)

    def _index_of(self, epoch: int) -> int | None:
        # Epochs strictly increase, so the list is sorted by epoch as well.
        lo, hi = 0, len(self._entries)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._entries[mid].epoch < epoch:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < len(self._entries) and self._entries[lo].epoch == epoch else None


def find_consistent_point(local: EpochCache, local_max: int,
                          remote: EpochCache, remote_max: int) -> int | None:
    """The offset up to which both commitlogs hold the same bytes (RocketMQ findConsistentPoint).

    Each side's last epoch ends at that side's max offset, earlier ones at the next entry's
    start. Scanning local entries from the highest epoch down, the first one that `remote`
    also has with the same start offset gives min(local end, remote end) of that epoch.
    None when no epoch matches.

    Example: an old master rejoins as a slave. It wrote [0, 150) in epoch 1, but only [0, 100)
    reached the new master, which was elected as epoch 2 at offset 100 and wrote up to 300.

        local  = [1@0]        local_max  = 150   epoch 1 ends at 150 locally
        remote = [1@0, 2@100] remote_max = 300   epoch 2 is not local; epoch 1 ends at 100
        -> min(150, 100) = 100: the slave cuts [100, 150) and copies from 100.
    """
    mine = local.entries
    theirs = remote.entries
    remote_index = {e.epoch: i for i, e in enumerate(theirs)}
    for i in range(len(mine) - 1, -1, -1):
        j = remote_index.get(mine[i].epoch)
        if j is not None and theirs[j].start_offset == mine[i].start_offset:
            return min(_end_in(mine, i, local_max), _end_in(theirs, j, remote_max))
    return None


def resume_offset(master: EpochCache, master_min: int, master_max: int,
                  slave: EpochCache, slave_max: int, *, slave_empty: bool,
                  sync_from_last_file: bool, file_size: int) -> int:
    """Where a slave continues copying the master's commitlog (it first cuts its own log there).

    An empty slave starts at the master's min offset, or with sync_from_last_file at the start
    of the master's last commitlog file. A slave with data continues at the consistent point;
    EpochError when there is none (also when the slave has data but no epochs: it cannot prove
    its bytes match) or when the master no longer holds the bytes from that point on.
    """
    if slave_empty:
        if sync_from_last_file:
            if file_size <= 0:
                raise EpochError(f"file_size must be positive, got {file_size}")
            return max(master_min, master_max - master_max % file_size)
        return master_min
    point = find_consistent_point(slave, slave_max, master, master_max)
    if point is None:
        raise EpochError(f"no common epoch between slave epochs {_format(slave.entries)} and "
                         f"master epochs {_format(master.entries)} (epoch@start_offset)")
    if point < master_min:
        raise EpochError(f"slave would resume at {point} but the master's log starts at "
                         f"{master_min}: wipe the slave's store to copy it from scratch")
    return point

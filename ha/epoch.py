"""Epochs: which master term wrote which range of the commitlog, and where a replica resumes.

Every time a broker becomes master it appends an entry (epoch, start_offset): the new epoch
number handed out by the controller and the commitlog offset at which that master writes its
first byte. Epoch e covers [start_offset(e), start_offset(next entry)); the last entry covers
everything up to the replica's max offset. Two replicas that hold the same epoch with the same
start offset hold the same bytes in that epoch (one master wrote them), so comparing epoch
lists finds the longest common prefix of two commitlogs without reading any data.

Rules of an epoch list (checked on every append and load):

* epoch >= 1 and start_offset >= 0;
* epochs strictly increase;
* start offsets never decrease. An equal start is allowed (RocketMQ requires strictly larger):
  a master elected and replaced before it wrote anything leaves an epoch with an empty range,
  and `EpochCache.truncate_from` keeps an entry that starts exactly at the cut point.

The epoch file uses RocketMQ's CheckpointFile text format with EpochFileCache's entry lines,
so a file can be moved between the two implementations:

    line       content                            example
    ---------  ---------------------------------  -------------
    1          number of entries N (decimal)      2
    2          CRC (decimal, see below)           773307083
    3 .. N+2   `epoch-startOffset` (decimal)      7-7000
                                                  8-8000

CRC = zlib.crc32 of the concatenated entry lines, each with its trailing "\\n", & 0x7FFFFFFF
(Java's CRC32 masked to a non-negative int). A stored CRC of 0 means "not checked". Lines end
in "\\n"; the example above is byte for byte "2\\n773307083\\n7-7000\\n8-8000\\n", the example
in RocketMQ's own CheckpointFile javadoc. An empty list is written as "0\\n0\\n" (RocketMQ
skips writing an empty list instead; here an empty file is a real state: a wiped replica).

`EpochFile.save` first copies the previous content to `<path>.bak` (only if it decodes, so a
damaged main file never overwrites a good backup), then replaces the file atomically. `load`
falls back to the backup when the main file is present but unreadable or corrupt.
"""
from __future__ import annotations

import bisect
import logging
import re
import threading
import zlib
from dataclasses import dataclass
from typing import Iterable, Sequence

from store.errors import CorruptFile, DiskError, StoreError
from store.fileio import DEFAULT_FILE_IO, FileIO

log = logging.getLogger(__name__)

_I32_MAX = (1 << 31) - 1  # RocketMQ stores the epoch as a Java int
_I64_MAX = (1 << 63) - 1  # ... and the start offset as a Java long
_CRC_NOT_CHECKED = 0
_ENTRY_LINE = re.compile(r"([0-9]+)-([0-9]+)")
_NUMBER = re.compile(r"[0-9]+")


class EpochError(StoreError):
    """An epoch entry or list breaks the ordering rules, or replicas share no usable epoch."""


@dataclass(frozen=True, order=True)
class EpochEntry:
    epoch: int  # >= 1
    start_offset: int  # >= 0, commitlog physical offset of this epoch's first byte

    def __post_init__(self) -> None:
        for name, value, low, high in (("epoch", self.epoch, 1, _I32_MAX),
                                       ("start_offset", self.start_offset, 0, _I64_MAX)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise EpochError(f"{name} {value!r} is not an integer in [{low}, {high}]")

    def __str__(self) -> str:
        return f"{self.epoch}@{self.start_offset}"


def _check_follows(prev: EpochEntry | None, entry: EpochEntry) -> None:
    if prev is None:
        return
    if entry.epoch <= prev.epoch:
        raise EpochError(f"epoch {entry} does not follow {prev}: epochs must strictly increase")
    if entry.start_offset < prev.start_offset:
        raise EpochError(f"epoch {entry} starts before {prev}: start offsets never decrease")


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

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        with self._lock:
            return tuple(self._entries)

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


# -- the epoch file ---------------------------------------------------------------------------
def _crc(entry_text: bytes) -> int:
    return zlib.crc32(entry_text) & 0x7FFFFFFF


def encode_epoch_file(entries: Iterable[EpochEntry]) -> bytes:
    """The file image of `entries` (see the module layout table). Validates the order."""
    listed = EpochCache(entries).entries
    body = "".join(f"{e.epoch}-{e.start_offset}\n" for e in listed).encode("ascii")
    return f"{len(listed)}\n{_crc(body)}\n".encode("ascii") + body


def decode_epoch_file(data: bytes, path: str) -> list[EpochEntry]:
    """Entries of a file image. CorruptFile (naming `path` and the problem) on a malformed
    header or entry line, a count or CRC mismatch, or entries that break the ordering rules."""
    def corrupt(problem: str) -> CorruptFile:
        return CorruptFile(f"epoch file {path}: {problem}")

    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as e:
        raise corrupt(f"not ASCII text at byte {e.start}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline; like Java's readLine, a missing one is tolerated
    if len(lines) < 2:
        raise corrupt(f"{len(lines)} line(s), expected at least 2 (count and CRC)")
    if not _NUMBER.fullmatch(lines[0]) or not _NUMBER.fullmatch(lines[1]):
        raise corrupt(f"bad header {lines[0]!r} / {lines[1]!r}: expected two decimal numbers")
    count, stored_crc = int(lines[0]), int(lines[1])
    entry_lines = lines[2:]
    if count != len(entry_lines):
        raise corrupt(f"header says {count} entries, found {len(entry_lines)} lines")
    # The CRC covers each entry line plus "\n", whether or not the file ends with one (as Java).
    actual_crc = _crc("".join(f"{line}\n" for line in entry_lines).encode("ascii"))
    if stored_crc != _CRC_NOT_CHECKED and stored_crc != actual_crc:
        raise corrupt(f"CRC mismatch: stored {stored_crc}, computed {actual_crc}")
    entries: list[EpochEntry] = []
    for n, line in enumerate(entry_lines, start=3):
        m = _ENTRY_LINE.fullmatch(line)
        if m is None:
            raise corrupt(f"line {n} {line!r} is not 'epoch-startOffset'")
        try:
            entries.append(EpochEntry(int(m.group(1)), int(m.group(2))))
        except EpochError as e:
            raise corrupt(f"line {n}: {e}") from None
    try:
        EpochCache(entries)
    except EpochError as e:
        raise corrupt(str(e)) from None
    return entries


class EpochFile:
    """Loads and saves an EpochCache at `path`, keeping the previous version in `path.bak`."""

    def __init__(self, path: str, io: FileIO = DEFAULT_FILE_IO) -> None:
        self.path = path
        self.backup_path = path + ".bak"
        self.io = io
        self._save_lock = threading.Lock()  # two saves would share the .tmp files

    def load(self) -> EpochCache:
        """Missing file -> empty cache (a new or wiped replica; the backup is not consulted, as
        save() never leaves the main file missing). Unreadable or corrupt -> the backup if it
        decodes (with a warning), else CorruptFile."""
        try:
            return EpochCache(self._read(self.path))
        except FileNotFoundError:
            return EpochCache()
        except CorruptFile as main_error:
            try:
                entries = self._read(self.backup_path)
            except (CorruptFile, FileNotFoundError) as bak_error:
                raise CorruptFile(f"{main_error}; backup unusable too: {bak_error}") from None
            log.warning("%s; using the backup %s", main_error, self.backup_path)
            return EpochCache(entries)

    def save(self, cache: EpochCache) -> None:
        """Back up the current file, then replace it atomically. DiskError if a write fails
        (the main file then still holds its old content)."""
        image = encode_epoch_file(cache.entries)
        with self._save_lock:
            previous = self._previous_good_image()
            try:
                if previous is not None:
                    self.io.write_file_atomic(self.backup_path, previous)
                self.io.write_file_atomic(self.path, image)
            except OSError as e:
                raise DiskError("save epoch file", self.path, e) from e

    def _read(self, path: str) -> list[EpochEntry]:
        """Decoded entries; FileNotFoundError if absent, CorruptFile if unreadable or bad."""
        try:
            data = self.io.read_file(path)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise CorruptFile(f"epoch file {path}: cannot read: [errno {e.errno}] "
                              f"{e.strerror}") from e
        return decode_epoch_file(data, path)

    def _previous_good_image(self) -> bytes | None:
        # A damaged current file is not copied: it would replace a backup that may be the
        # only good copy left.
        try:
            data = self.io.read_file(self.path)
            decode_epoch_file(data, self.path)
        except (OSError, CorruptFile):
            return None
        return data

"""The epoch file (`epochFileCheckpoint`, store.layout.EPOCH_FILE): which master term wrote which
range of the commitlog, as (epoch, start_offset) pairs. The meaning of the entries (consistent
points, where a replica resumes) belongs to ha.epoch; this module reads and writes the file.

The file uses RocketMQ's CheckpointFile text format with EpochFileCache's entry lines, so a file
can be moved between the two implementations:

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

Rules of an epoch list, checked on every load and save (and by ha.epoch on every append):

* 1 <= epoch <= 2**31 - 1 (a Java int) and 0 <= start_offset <= 2**63 - 1 (a Java long);
* epochs strictly increase;
* start offsets never decrease. An equal start is allowed (RocketMQ requires strictly larger):
  a master elected and replaced before it wrote anything leaves an epoch with an empty range.

`EpochFile.save` first copies the previous content to `<path>.bak` (only if it decodes, so a
damaged main file never overwrites a good backup), then replaces the file atomically (`.tmp` +
rename: a leftover `.tmp` is ignored). `load` falls back to the backup when the main file is
present but unreadable or corrupt.
"""
from __future__ import annotations

import logging
import re
import threading
import zlib
from typing import Iterable, Sequence

from .errors import CorruptFile, DiskError
from .commitlog.fileio import DEFAULT_FILE_IO, FileIO
from .layout import backup_path

log = logging.getLogger(__name__)

EpochPair = tuple[int, int]  # (epoch, start_offset)
_I32_MAX = (1 << 31) - 1  # RocketMQ stores the epoch as a Java int
_I64_MAX = (1 << 63) - 1  # ... and the start offset as a Java long
_CRC_NOT_CHECKED = 0
_ENTRY_LINE = re.compile(r"([0-9]+)-([0-9]+)")
_NUMBER = re.compile(r"[0-9]+")


# -- the rules ----------------------------------------------------------------------------------
def format_entry(epoch: int, start_offset: int) -> str:
    """`epoch@start_offset`, how messages name an entry."""
    return f"{epoch}@{start_offset}"


def check_entry(epoch: object, start_offset: object) -> None:
    """ValueError unless both values are integers in range (see the module rules)."""
    for name, value, low, high in (("epoch", epoch, 1, _I32_MAX),
                                   ("start_offset", start_offset, 0, _I64_MAX)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} {value!r} is not an integer in [{low}, {high}]")


def check_follows(prev: EpochPair | None, entry: EpochPair) -> None:
    """ValueError unless `entry` may follow `prev` (None: it is the first)."""
    if prev is None:
        return
    if entry[0] <= prev[0]:
        raise ValueError(f"epoch {format_entry(*entry)} does not follow {format_entry(*prev)}: "
                         f"epochs must strictly increase")
    if entry[1] < prev[1]:
        raise ValueError(f"epoch {format_entry(*entry)} starts before {format_entry(*prev)}: "
                         f"start offsets never decrease")


def checked(entries: Iterable[Sequence[int]]) -> list[EpochPair]:
    """`entries` as a list of pairs; ValueError when they break the rules."""
    out: list[EpochPair] = []
    for epoch, start_offset in entries:
        check_entry(epoch, start_offset)
        pair = (epoch, start_offset)
        check_follows(out[-1] if out else None, pair)
        out.append(pair)
    return out


# -- the format ---------------------------------------------------------------------------------
def _crc(entry_text: bytes) -> int:
    return zlib.crc32(entry_text) & 0x7FFFFFFF


def encode_epoch_file(entries: Iterable[Sequence[int]]) -> bytes:
    """The file image of `entries` (see the layout table). ValueError when they break the
    rules."""
    listed = checked(entries)
    body = "".join(f"{epoch}-{start}\n" for epoch, start in listed).encode("ascii")
    return f"{len(listed)}\n{_crc(body)}\n".encode("ascii") + body


def decode_epoch_file(data: bytes, path: str) -> list[EpochPair]:
    """Entries of a file image. CorruptFile (naming `path` and the problem) on a malformed
    header or entry line, a count or CRC mismatch, or entries that break the rules."""
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
    entries: list[EpochPair] = []
    for n, line in enumerate(entry_lines, start=3):
        m = _ENTRY_LINE.fullmatch(line)
        if m is None:
            raise corrupt(f"line {n} {line!r} is not 'epoch-startOffset'")
        pair = (int(m.group(1)), int(m.group(2)))
        try:
            check_entry(*pair)
        except ValueError as e:
            raise corrupt(f"line {n}: {e}") from None
        entries.append(pair)
    try:
        return checked(entries)
    except ValueError as e:
        raise corrupt(str(e)) from None


# -- the file -----------------------------------------------------------------------------------
class EpochFile:
    """Loads and saves the epoch list at `path`, keeping the previous version in `path.bak`.
    `_save_lock` serialises saves (two would share the `.tmp` files)."""

    def __init__(self, path: str, io: FileIO = DEFAULT_FILE_IO) -> None:
        self.path = path
        self.backup_path = backup_path(path)
        self.io = io
        self._save_lock = threading.Lock()

    def load(self) -> list[EpochPair]:
        """Missing file -> [] (a new or wiped replica; the backup is not consulted, as save()
        never leaves the main file missing). Unreadable or corrupt -> the backup if it decodes
        (with a warning), else CorruptFile."""
        try:
            return self._read(self.path)
        except FileNotFoundError:
            return []
        except CorruptFile as main_error:
            try:
                entries = self._read(self.backup_path)
            except (CorruptFile, FileNotFoundError) as bak_error:
                raise CorruptFile(f"{main_error}; backup unusable too: {bak_error}") from None
            log.warning("%s; using the backup %s", main_error, self.backup_path)
            return entries

    def save(self, entries: Iterable[Sequence[int]]) -> None:
        """Back up the current file, then replace it atomically with `entries` ((epoch,
        start_offset) pairs; an ha.epoch.EpochCache iterates as such). ValueError when they
        break the rules; DiskError if a write fails (the main file then still holds its old
        content)."""
        image = encode_epoch_file(entries)
        with self._save_lock:
            previous = self._previous_good_image()
            try:
                if previous is not None:
                    self.io.write_file_atomic(self.backup_path, previous)
                self.io.write_file_atomic(self.path, image)
            except OSError as e:
                raise DiskError("save epoch file", self.path, e) from e

    def _read(self, path: str) -> list[EpochPair]:
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

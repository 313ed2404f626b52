"""The commitlog files an archive holds for one broker group: RocketMQ's files under their own
names, read-only, with gaps between them allowed.

`<group dir>/commitlog/<20-digit offset>` holds the bytes a node's commitlog held at that
offset, unchanged (so every physical offset, message id and consume-queue unit stays what it
was on the broker). A live store's files must follow each other; here a file may be missing
(the archive was down while a node deleted it, or the archive's own retention removed it),
so lookups bisect the list of bases instead of dividing by the file size.

It offers what store.reader.MessageReader asks of a commitlog (min_offset, max_offset,
get_message, records, store_time_of), so the store's reader, consume queues and index serve the
archive's queries unchanged.

Locking: `_lock` guards the list and the mappings; a read decodes under it (a record is
copied out), so removing a file never unmaps bytes a reader is using.
"""
from __future__ import annotations

import bisect
import os
import threading
from typing import Iterator

from store import codec
from store.errors import OffsetOutOfRange
from store.layout import is_offset_file_name
from store.readonly.files import ROFile, numbered_files


class ArchivedCommitLog:
    """One group's archived commitlog files, read-only, gaps allowed (the module docstring):
    owns the mapped files and their bases in offset order, and answers what MessageReader
    asks of a commitlog. `_lock` (an RLock) guards the list and the mappings; every read
    decodes under it, so `remove_first` never unmaps bytes in use."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._files: list[ROFile] = []
        self._bases: list[int] = []
        self._lock = threading.RLock()

    def load(self) -> None:
        with self._lock:
            self._files = [ROFile(p, base) for p, base in
                           numbered_files(self.directory, is_offset_file_name)]
            self._bases = [f.base for f in self._files]

    def add(self, path: str, base: int) -> None:
        """A file that has just been stored under its final name (above every held file, or
        filling a hole: the list stays in offset order)."""
        with self._lock:
            i = bisect.bisect_left(self._bases, base)
            if i < len(self._bases) and self._bases[i] == base:
                return
            self._files.insert(i, ROFile(path, base))
            self._bases.insert(i, base)

    def remove_first(self) -> str | None:
        """Unmap and delete the oldest file; its path, or None when there is none."""
        with self._lock:
            if not self._files:
                return None
            f = self._files.pop(0)
            self._bases.pop(0)
            f.close()
        os.unlink(f.path)
        return f.path

    def files(self) -> list[ROFile]:
        with self._lock:
            return list(self._files)

    def holds(self, base: int) -> bool:
        with self._lock:
            i = bisect.bisect_left(self._bases, base)
            return i < len(self._bases) and self._bases[i] == base

    def _file_at(self, offset: int) -> ROFile | None:
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            return None
        f = self._files[i]
        return f if offset < f.end else None

    # -- what MessageReader asks of a commitlog -------------------------------------------
    def min_offset(self) -> int:
        with self._lock:
            return self._files[0].base if self._files else 0

    def max_offset(self) -> int:
        with self._lock:
            return self._files[-1].end if self._files else 0

    def get_message(self, offset: int, size: int | None = None,
                    check_crc: bool = True) -> codec.DecodeResult:
        with self._lock:
            f = self._file_at(offset)
            if f is None:
                raise OffsetOutOfRange(f"offset {offset} is not in an archived file")
            pos = offset - f.base
            limit = f.size if size is None else min(f.size, pos + size)
            return codec.decode(f.view, pos, limit, check_crc=check_crc)

    def records(self) -> "ArchivedRecords":
        """A run of reads (store.commitlog.commitlog.CommitLog.records' interface): each one is a
        get_message, under the lock, so no file is held between them."""
        return ArchivedRecords(self)

    def store_time_of(self, offset: int, size: int) -> int | None:
        with self._lock:
            f = self._file_at(offset)
            if f is None or offset - f.base + 64 > f.size:
                return None
            pos = offset - f.base
            return codec.store_timestamp_at(f.view, pos)

    def close(self) -> None:
        with self._lock:
            for f in self._files:
                f.close()
            self._files, self._bases = [], []

    def __iter__(self) -> Iterator[ROFile]:
        return iter(self.files())


class ArchivedRecords:
    """ArchivedCommitLog.records(): get() reads one record like get_message; close() has
    nothing to release. Used by one caller."""

    def __init__(self, log: ArchivedCommitLog) -> None:
        self.get = log.get_message

    def close(self) -> None:
        pass

    def __enter__(self) -> "ArchivedRecords":
        return self

    def __exit__(self, *exc) -> None:
        pass

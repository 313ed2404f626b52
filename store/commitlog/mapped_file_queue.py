"""An ordered run of equally sized MappedFiles forming one logical, offset-addressed log.

Files are named by the 20-digit offset of their first byte, so offset -> file is arithmetic.
Global positions: flushed_where / committed_where are offsets in the log; max_offset is the end
of what readers may see. Truncation is crash-safe (zero and sync the cut bytes first, then delete
later files from the newest down), so a crash in the middle never resurrects a cut tail.
"""
from __future__ import annotations

import os
import threading
from typing import Callable, Iterator

from store.errors import CorruptFile
from .fileio import FileIO
from store.layout import is_offset_file_name, offset_file_name
from .mapped_file import MappedFile


class MappedFileQueue:
    """One directory of equally sized MappedFiles forming one log: owns the list of files, the
    files created ahead (`_ready`), the flush and commit positions (`flushed_where`,
    `committed_where`) and the crash-safe truncation and deletion of files.

    `_lock` (an RLock) guards the list of files (and `_ready`), not their contents: appends
    are serialised by the owner (the commitlog's put lock, a consume queue's writer), and
    `flushed_where` / `committed_where` are moved by one flushing thread at a time.
    `first_file`, `last_file` and the offsets read the list unlocked (one reference read)."""

    def __init__(self, directory: str, file_size: int, io: FileIO, *,
                 write_through_mmap: bool = True, small_flushes: bool = False) -> None:
        """`small_flushes`: see MappedFile (a SYNC_FLUSH commitlog's files)."""
        self.directory = directory
        self.file_size = file_size
        self.io = io
        self.write_through_mmap = write_through_mmap
        self.small_flushes = small_flushes
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self.committed_where = 0
        self._ready: list[MappedFile] = []  # created ahead by prepare_files, not yet written
        # Cuts that may bring a file back under a name it had (truncate_to, delete_all): a
        # process mapping the files itself (the conversion process) maps them again then.
        self.truncations = 0
        self._lock = threading.RLock()  # guards the list of files, not their contents

    # -- loading ---------------------------------------------------------------------------
    def load(self) -> list[str]:
        """Map the existing files in offset order. A newest file of the wrong size is a file
        whose creation was interrupted: it holds no data and is removed. Returns notes."""
        notes: list[str] = []
        if not os.path.isdir(self.directory):
            return notes
        names = sorted(n for n in os.listdir(self.directory) if is_offset_file_name(n))
        for i, name in enumerate(names):
            path = os.path.join(self.directory, name)
            size = os.path.getsize(path)
            if size != self.file_size:
                if i == len(names) - 1:
                    self.io.unlink(path)
                    self.io.fsync_dir(self.directory)
                    notes.append(f"removed {path}: {size} bytes, an interrupted file creation")
                    continue
                raise CorruptFile(f"{path} has {size} bytes, expected {self.file_size}")
            expected = self.files[-1].file_from_offset + self.file_size if self.files else None
            if expected is not None and int(name) != expected:
                raise CorruptFile(f"{path} does not follow the previous file (expected {expected})")
            mf = MappedFile(path, self.file_size, self.io, write_through_mmap=self.write_through_mmap,
                            small_flushes=self.small_flushes)
            mf.set_positions(self.file_size)
            self.files.append(mf)
        return notes

    # -- lookup ----------------------------------------------------------------------------
    def snapshot(self) -> list[MappedFile]:
        with self._lock:
            return list(self.files)

    @property
    def first_file(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    @property
    def last_file(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    def min_offset(self) -> int:
        f = self.first_file
        return f.file_from_offset if f else 0

    def max_offset(self) -> int:
        """End of the readable bytes."""
        f = self.last_file
        return f.file_from_offset + f.read_position if f else 0

    def max_wrote_offset(self) -> int:
        f = self.last_file
        return f.file_from_offset + f.wrote_position if f else 0

    def find_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        with self._lock:
            files = self.files
            if not files:
                return None
            first = files[0].file_from_offset
            idx = (offset - first) // self.file_size if offset >= first else -1
            if 0 <= idx < len(files):
                f = files[idx]
                if f.file_from_offset <= offset < f.file_from_offset + self.file_size:
                    return f
            return files[0] if return_first_on_not_found else None

    def find_by_time(self, timestamp_ms: int) -> MappedFile | None:
        """The first file modified at or after the timestamp, else the last."""
        files = self.snapshot()
        for f in files:
            if f.last_modified_ms >= timestamp_ms:
                return f
        return files[-1] if files else None

    def get_last_file_for_write(self, start_offset: int = 0) -> MappedFile:
        """The file to append to, creating the first one at `start_offset` (rounded down to a
        file boundary) or the next one when the last is full. Raises CreateFileError."""
        with self._lock:
            last = self.files[-1] if self.files else None
            if last is not None and not last.is_full:
                return last
            if last is None:
                create_at = start_offset - start_offset % self.file_size
            else:
                create_at = last.file_from_offset + self.file_size
                last.written_out()
            if self._ready and self._ready[0].file_from_offset == create_at:
                mf = self._ready.pop(0)
            else:
                self._drop_ready()
                mf = self._create(create_at)
            if last is None:
                self.flushed_where = self.committed_where = create_at
            self.files.append(mf)
            return mf

    def _create(self, offset: int) -> MappedFile:
        self.io.makedirs(self.directory)
        return MappedFile(os.path.join(self.directory, offset_file_name(offset)), self.file_size,
                          self.io, write_through_mmap=self.write_through_mmap, create=True,
                          small_flushes=self.small_flushes)

    def prepare_files(self, count: int, start_offset: int = 0) -> None:
        """Create the next `count` files ahead of need, so that an append spanning several
        files either has all of them or fails before writing anything (CreateFileError)."""
        with self._lock:
            while len(self._ready) < count:
                if self._ready:
                    at = self._ready[-1].file_from_offset + self.file_size
                elif self.files:
                    at = self.files[-1].file_from_offset + self.file_size
                else:
                    at = start_offset - start_offset % self.file_size
                self._ready.append(self._create(at))

    def _drop_ready(self) -> None:
        for f in self._ready:
            f.destroy(0, 0)
        self._ready = []

    # -- commit and flush -------------------------------------------------------------------
    def commit(self, least_pages: int = 0) -> int:
        """Commit the write buffers (write-buffer mode); returns committed_where."""
        for f in self.snapshot():
            if f.wrote_position > f.committed_position:
                f.commit(least_pages)
            end = f.file_from_offset + f.committed_position
            if end > self.committed_where:
                self.committed_where = end
        return self.committed_where

    def flush(self, least_pages: int = 0) -> int:
        """Flush every file between flushed_where and the committed end; returns flushed_where.
        Raises DiskError on the first failure, with flushed_where still at the last success."""
        for f in self.snapshot():
            if f.file_from_offset + self.file_size <= self.flushed_where:
                continue
            if not f.write_through_mmap and f.wrote_position > f.committed_position:
                f.commit()
            f.flush(least_pages)
            end = f.file_from_offset + f.flushed_position
            if end > self.flushed_where:
                self.flushed_where = end
            if not f.is_full:
                break
        return self.flushed_where

    # -- truncation, retention ----------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Cut the log at `offset`, crash-safely: the bytes past it in its file are zeroed and
        synced first, then later files are deleted newest first and the directory synced. After
        a crash at any step, a recovery scan stops at `offset` (zeros are not a record)."""
        with self._lock:
            keep = [f for f in self.files if f.file_from_offset < offset]
            drop = [f for f in self.files if f.file_from_offset >= offset]
            if keep and offset < keep[-1].file_from_offset + self.file_size:
                keep[-1].zero_from(offset - keep[-1].file_from_offset)
            elif drop:
                # The cut is on a file boundary: zero the first dropped file's header before
                # the deletions, so a crash half way cannot leave a readable later file.
                drop[0].zero_from(0, min(self.file_size, 4096))
            self._drop_ready()
            for f in reversed(drop):
                f.destroy(0, 0)
            if drop:
                self.io.fsync_dir(self.directory)
            self.files = keep
            self.truncations += 1
            self.flushed_where = min(self.flushed_where, offset)
            self.committed_where = min(self.committed_where, offset)

    def delete_first_files(self, predicate: Callable[[MappedFile], bool], max_count: int,
                           interval_forcibly_ms: int, now_ms: int) -> list[str]:
        """Delete files from the oldest while `predicate` holds, never the file being written.
        Files still held by readers are kept (retried later). Returns the deleted paths."""
        deleted: list[str] = []
        with self._lock:
            candidates = self.files[:-1]
        for f in candidates:
            if len(deleted) >= max_count or not predicate(f):
                break
            if not f.destroy(interval_forcibly_ms, now_ms):
                break
            deleted.append(f.path)
            with self._lock:
                self.files.remove(f)
        if deleted:
            self.io.fsync_dir(self.directory)
        return deleted

    def delete_all(self) -> None:
        with self._lock:
            self._drop_ready()
            for f in reversed(self.files):
                f.destroy(0, 0)
            self.files = []
            self.truncations += 1
            self.flushed_where = self.committed_where = 0

    def close(self) -> None:
        with self._lock:
            for f in self.files + self._ready:
                f.close()

    def __iter__(self) -> Iterator[MappedFile]:
        return iter(self.snapshot())

    def __len__(self) -> int:
        return len(self.files)

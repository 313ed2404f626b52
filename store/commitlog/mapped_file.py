"""One fixed-size store file named by the 20-digit offset of its first byte.

Positions inside a file (all relative to its start, 0 <= flushed <= committed <= wrote <= size):
- wrote: bytes appended so far;
- committed: bytes handed to the kernel (equal to wrote when writing through the mapping;
  behind it in write-buffer mode, where appends collect in memory until commit() pwrite()s them);
- flushed: bytes known to be on disk (msync / fdatasync returned success).

Readers see bytes below `read_position` (committed). The file is preallocated when created, so
writing through the mapping never touches an unbacked page. A failed msync/fdatasync raises
DiskError and leaves `flushed` where it was; the caller decides that the store is broken.
`hold()`/`release()` count readers: `destroy()` unmaps only when nobody holds the file, or
after `destroy_mapped_file_interval_forcibly` has passed since the first attempt.
"""
from __future__ import annotations

import os
import threading
from typing import Sequence

from store.errors import CreateFileError, DiskError
from .fileio import PAGE_SIZE, FileIO


# The smallest append written by pwritev (append_many). Below it a copy into the mapping
# costs less: os.pwritev releases the GIL, and a caller that gives it up for a short write
# waits for it to come back behind the node's other threads (16 µs per call for the consumer
# state's records, against about 1 µs for the copy; docs/performance/history.md, "The commitlog is
# written by pwrite").
PWRITE_MIN_BYTES = 64 * 1024


def worth_flushing(target: int, flushed: int, least_pages: int) -> bool:
    """RocketMQ's isAbleToFlush for a file that is not full: something to flush, and at least
    `least_pages` pages of it (0: any amount). Positions may be file or log offsets alike,
    files being a whole number of pages."""
    if target <= flushed:
        return False
    return least_pages <= 0 or target // PAGE_SIZE - flushed // PAGE_SIZE >= least_pages


class MappedFile:
    """Owns one preallocated file: its descriptor, its mapping (`mm`, `view`), the three
    positions, the bytes appended but not yet committed (write-buffer mode) and the count of
    readers holding it.

    Who may touch what:
    - Appends (`append`, `append_many`, `write_at`, `zero_from`, `set_positions`) come
      from one writer at a time, serialised by the owner (CommitLog.put_lock, a
      ConsumeQueue's write lock, the IndexService's write lock); written through (the
      mapping or pwritev) they take no lock here.
    - `_buffer_lock` guards `_pending` and `wrote_position` in write-buffer mode: append adds to
      the buffer while commit takes bytes out of it (and puts them back when pwrite fails).
    - `_commit_lock` lets one commit run at a time; it is held across the pwrite, while
      `_buffer_lock` is held only to take the bytes, so appends go on during the write.
    - `_refs_lock` guards `_refs` and `_available` (hold/release/shutdown/close); the unmap
      happens under it, so a reader that got hold() == True reads a live mapping.
    - `flushed_position` is moved only by flush(), called by one flush service at a time.
    Readers read below `read_position` without a lock, inside hold()/release()."""

    def __init__(self, path: str, file_size: int, io: FileIO, *, write_through_mmap: bool = True,
                 create: bool = False, small_flushes: bool = False) -> None:
        """`small_flushes`: the file is flushed in small steps as it is written (a SYNC_FLUSH
        commitlog), so the range it is written in is advised random (FileIO.advise_access)."""
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(os.path.basename(path))
        self.io = io
        self.write_through_mmap = write_through_mmap
        self._advise = write_through_mmap and small_flushes
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.last_modified_ms = 0
        self.pwritten_bytes = 0  # appended by pwritev (the rest: copies into the mapping)
        self._pending = bytearray()  # write-buffer mode: bytes in [committed, wrote)
        self._buffer_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._refs = 1  # the file queue's own reference
        self._refs_lock = threading.Lock()
        self._available = True
        self._first_destroy_ms = 0
        self.fd = -1
        try:
            self.fd = io.open_rw(path, create=create)
            if create:
                io.preallocate(self.fd, file_size, path)
                io.fsync_dir(os.path.dirname(path))
            elif io.file_size(self.fd) != file_size:
                raise ValueError(f"{path} has {io.file_size(self.fd)} bytes, expected {file_size}")
            self.mm = io.map(self.fd, file_size, path)
            if create and self._advise:  # written through the mapping from 0 on
                io.advise_access(self.mm, 0, True, path)
        except OSError as e:
            self._abandon(create)
            raise CreateFileError(path, e) from e
        except BaseException:
            self._abandon(create)
            raise
        self.view = memoryview(self.mm)

    def _abandon(self, created: bool) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if created:
            try:
                os.unlink(self.path)
            except OSError:
                pass

    # -- positions ------------------------------------------------------------------------
    @property
    def read_position(self) -> int:
        return self.wrote_position if self.write_through_mmap else self.committed_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def set_positions(self, pos: int) -> None:
        """Used by recovery: everything below `pos` is valid and on disk. With small flushes,
        the range written on from `pos` is advised random (FileIO.advise_access)."""
        with self._buffer_lock:
            self._pending.clear()
            self.wrote_position = self.committed_position = self.flushed_position = pos
        if pos < self.file_size and self._advise:
            self.io.advise_access(self.mm, pos, True, self.path)

    def written_out(self) -> None:
        """The file is full and its writer moved on: readers get readahead back."""
        if self._advise:
            self.io.advise_access(self.mm, 0, False, self.path)

    # -- writing --------------------------------------------------------------------------
    def append(self, data, stamp_ms: int = 0) -> int:
        """Append `data` (must fit) and return the position it was written at."""
        pos = self.wrote_position
        n = len(data)
        if pos + n > self.file_size:
            raise ValueError(f"append of {n} bytes at {pos} overflows {self.path}")
        if self.write_through_mmap:
            self.mm[pos:pos + n] = data
            self.wrote_position = self.committed_position = pos + n
        else:
            with self._buffer_lock:
                self._pending += data
                self.wrote_position = pos + n
        if stamp_ms:
            self.last_modified_ms = stamp_ms
        return pos

    def append_many(self, datas: Sequence[bytes | bytearray | memoryview],
                    stamp_ms: int = 0) -> int:
        """append() of several pieces (they must fit together), the position moved once,
        after the last, so a reader sees all of them or none. In a write-through file, pieces
        adding up to PWRITE_MIN_BYTES or more (a commitlog batch, a slave's replicated chunk)
        go in by one pwritev instead of copies into the mapping: the kernel copies them and
        allocates the fresh pages inside the call, without the GIL and without a page fault
        per 4 KiB page. Either way the bytes are in the page cache when it returns, mapped
        readers see them once the position moves, and flush() msyncs the range (msync syncs
        the file's dirty pages however they were written). A failed pwritev raises DiskError
        and moves nothing."""
        pos = start = self.wrote_position
        n = sum(map(len, datas))
        if pos + n > self.file_size:
            raise ValueError(f"append of {len(datas)} pieces ({n} bytes) at {pos} overflows "
                             f"{self.path}")
        if self.write_through_mmap and n >= PWRITE_MIN_BYTES:
            try:
                self.io.pwritev(self.fd, datas, pos, self.path)
            except OSError as e:
                raise DiskError("pwrite", self.path, e) from e
            self.pwritten_bytes += n
            self.wrote_position = self.committed_position = pos + n
        elif self.write_through_mmap:
            self.io.mapped_write(self.path)
            mm = self.mm
            for data in datas:
                end = pos + len(data)
                mm[pos:end] = data
                pos = end
            self.wrote_position = self.committed_position = pos
        else:
            with self._buffer_lock:
                pending = self._pending
                for data in datas:
                    pending += data
                self.wrote_position = pos + n
        if stamp_ms:
            self.last_modified_ms = stamp_ms
        return start

    def commit(self, least_pages: int = 0) -> None:
        """Write-buffer mode: pwrite the pending bytes to the file (no-op through the mapping)."""
        if self.write_through_mmap:
            self.committed_position = self.wrote_position
            return
        with self._commit_lock:
            with self._buffer_lock:
                start = self.committed_position
                if not self._pending:
                    return
                if least_pages > 0 and not self.is_full and (
                        (self.wrote_position // PAGE_SIZE - start // PAGE_SIZE) < least_pages):
                    return
                data = bytes(self._pending)
                self._pending.clear()
            try:
                self.io.pwrite(self.fd, data, start, self.path)
            except OSError as e:
                with self._buffer_lock:  # keep the bytes so nothing is silently lost in memory
                    self._pending[0:0] = data
                raise DiskError("pwrite", self.path, e) from e
            self.committed_position = start + len(data)

    def is_able_to_flush(self, least_pages: int) -> bool:
        target = self.committed_position if not self.write_through_mmap else self.wrote_position
        if self.is_full:
            return target > self.flushed_position
        return worth_flushing(target, self.flushed_position, least_pages)

    def flush(self, least_pages: int = 0) -> int:
        """Make [flushed, committed) durable; return the new flushed position. A failure raises
        DiskError and leaves flushed_position unchanged."""
        if not self.is_able_to_flush(least_pages):
            return self.flushed_position
        target = self.wrote_position if self.write_through_mmap else self.committed_position
        start = self.flushed_position
        try:
            if self.write_through_mmap:
                self.io.msync(self.mm, start, target - start, self.path)
            else:
                self.io.fdatasync(self.fd, self.path)
        except OSError as e:
            raise DiskError("msync" if self.write_through_mmap else "fdatasync", self.path, e) from e
        self.flushed_position = target
        return target

    def write_at(self, pos: int, data) -> None:
        """Write `data` at a position at or below wrote (used for in-place fixes, not appends)."""
        if self.write_through_mmap:
            self.mm[pos:pos + len(data)] = data
        else:
            try:
                self.io.pwrite(self.fd, data, pos, self.path)
            except OSError as e:
                raise DiskError("pwrite", self.path, e) from e

    def zero_from(self, pos: int, end: int | None = None) -> None:
        """Crash-safe cut: make [pos, end) read as zeros on disk and sync it before anyone
        forgets those bytes, so a crash never brings the old tail back (RocketMQ #10666)."""
        end = self.file_size if end is None else end
        with self._buffer_lock:
            self._pending.clear()
        try:
            if end > pos:
                # FALLOC_FL_ZERO_RANGE also drops the range from the page cache, so the
                # mapping reads zeros and no dirty page can write the old bytes back later.
                self.io.zero_range(self.fd, pos, end - pos, self.path)
                self.io.fdatasync(self.fd, self.path)
        except OSError as e:
            raise DiskError("zero_range", self.path, e) from e
        self.wrote_position = self.committed_position = self.flushed_position = pos
        if self._advise:  # written again from pos on (FileIO.advise_access)
            self.io.advise_access(self.mm, pos, True, self.path)

    # -- reading --------------------------------------------------------------------------
    def populate(self, pos: int, size: int) -> bool:
        """Fault [pos, pos+size) in ahead of the writes (`FileIO.populate`); False when the
        mapping is gone, the file is written with pwrite, or the kernel cannot."""
        end = min(pos + size, self.file_size)
        if end <= pos or not self.write_through_mmap or not self.hold():
            return False
        try:
            return self.io.populate(self.mm, pos, end - pos, self.path)
        finally:
            self.release()

    def pread(self, pos: int, size: int) -> bytes:
        """Like read(), through the file (pread releases the GIL for the copy and maps no
        pages into this process): for replication's large slices. The caller holds the file
        (hold/release) so the descriptor stays open."""
        end = min(pos + size, self.read_position)
        return self.io.pread(self.fd, end - pos, pos, self.path) if end > pos else b""

    def read(self, pos: int, size: int) -> bytes:
        end = min(pos + size, self.read_position)
        return bytes(self.view[pos:end]) if end > pos else b""

    def hold(self) -> bool:
        with self._refs_lock:
            if not self._available:
                return False
            self._refs += 1
            return True

    def release(self) -> None:
        with self._refs_lock:
            self._refs -= 1
            if self._refs <= 0 and not self._available:
                self._unmap()

    @property
    def available(self) -> bool:
        return self._available

    # -- lifecycle ------------------------------------------------------------------------
    def shutdown(self, interval_forcibly_ms: int, now_ms: int) -> bool:
        """Drop the queue's reference; unmap when unused or when the grace period is over.
        Returns True when the mapping is gone."""
        with self._refs_lock:
            if self._available:
                self._available = False
                self._first_destroy_ms = now_ms
                self._refs -= 1
            elif self._refs > 0 and now_ms - self._first_destroy_ms >= interval_forcibly_ms:
                self._refs = 0  # readers that still hold it keep their memoryview alive
            if self._refs <= 0:
                self._unmap()
                return True
            return False

    def _unmap(self) -> None:
        if self.fd < 0:
            return
        try:
            self.view.release()
        except BufferError:
            pass
        try:
            self.mm.close()
        except BufferError:
            pass  # an exported slice still lives; the mapping is freed with it
        os.close(self.fd)
        self.fd = -1

    def destroy(self, interval_forcibly_ms: int, now_ms: int) -> bool:
        """Unmap and delete the file; False while readers still hold it (try again later)."""
        if not self.shutdown(interval_forcibly_ms, now_ms):
            return False
        try:
            self.io.unlink(self.path)
        except FileNotFoundError:
            pass
        return True

    def remap(self, mm, size: int) -> None:
        """Take a larger mapping of the same file (a grown index file) under the readers'
        lock; the old one is not closed: a reader may still use it, and it is freed with its
        last reference."""
        with self._refs_lock:
            old_view = self.view
            self.mm, self.view, self.file_size = mm, memoryview(mm), size
        try:
            old_view.release()
        except BufferError:
            pass

    def close(self) -> None:
        """Unmap without deleting (clean shutdown)."""
        with self._refs_lock:
            self._available = False
            self._refs = 0
            self._unmap()

    def __repr__(self) -> str:
        return (f"MappedFile({os.path.basename(self.path)}, wrote={self.wrote_position}, "
                f"committed={self.committed_position}, flushed={self.flushed_position})")

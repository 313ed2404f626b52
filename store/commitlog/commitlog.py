"""The commitlog: every message of every topic, appended in order to a MappedFileQueue.

Put path: records are encoded before the put lock (codec.encode); under the lock only the
fields known there are patched (queue offset from the topic-queue table, physical offset, store
timestamp) and the bytes copied into the last file. A record that does not fit, together with
END_FILE_MIN_BLANK_LENGTH, makes the file end with a BLANK record and the next file start.
A batch is appended under one lock acquisition; one that fits the last file is patched record by
record, then written and made visible at once (`MappedFile.append_many`).

The slave path (append_raw) writes replicated bytes verbatim at exactly the current end.
Both paths write through MappedFile.append_many: 64 KiB or more (a batch, a catch-up
chunk) by one pwritev into the file, where the kernel allocates the fresh pages inside the
call, without the GIL and without a page fault per 4 KiB page; less by a copy into the
mapping, which costs less than giving up the GIL for a short call. The mapping serves the
readers (docs/performance/history.md, "The commitlog is written by pwrite").
Truncation is crash-safe (MappedFileQueue.truncate_to zeroes and syncs before it forgets).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from store import codec
from common.clock import Clock
from store.codec import EncodedRecord, SysFlag
from store.codec.dispatch import HINTS_MAX, DispatchRequest, fill_hint
from store.errors import DiskError, OffsetOutOfRange
from .fileio import FileIO
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from store.put_result import AppendResult, OriginalAppend
from common.yielding_lock import YieldingLock

if TYPE_CHECKING:
    from store.dedup.window import DuplicateWindow, Original

_SKIP_QUEUE_OFFSET = (SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE)


class CommitLog:
    """Owns the commitlog's MappedFileQueue, the next queue offset of every topic-queue
    (`topic_queue_table`), the last store timestamp handed out and the msgId prefix of this
    store host.

    `put_lock` (a YieldingLock) guards every change of the log's end and of those fields:
    put/put_batch (queue offsets, physical offset, store time, the copy into the last file,
    the dispatch hint each record leaves for reput in `dispatch_hints`, the duplicate window's
    check and entries of each put: the window's own lock is taken inside this one),
    append_raw (the slave path) and truncate. Readers (read, read_chunk, get_message,
    store_time_of, files) take no lock: they hold the file they read (MappedFile.hold) and see
    only bytes below its read position. The queue's own lock guards its list of files."""

    def __init__(self, directory: str, file_size: int, io: FileIO, clock: Clock, *,
                 write_through_mmap: bool = True, store_host: str = "127.0.0.1:10911",
                 small_flushes: bool = False) -> None:
        """`small_flushes`: flushed a few records at a time (SYNC_FLUSH), see MappedFile."""
        self.queue = MappedFileQueue(directory, file_size, io, write_through_mmap=write_through_mmap,
                                     small_flushes=small_flushes)
        self.file_size = file_size
        self.clock = clock
        self.put_lock = YieldingLock()  # a plain Lock convoys under the GIL (see the module)
        # next queue offset per (topic, queue id): assigned under the put lock
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.last_store_timestamp = 0
        # reput's hints (ReputService.hints): a put's record that carries a dispatch hint
        # leaves it there under the put lock; None: nobody takes them
        self.dispatch_hints: dict[int, DispatchRequest] | None = None
        ip, port = codec.parse_host(store_host)
        self._msg_id_prefix = (codec.pack_host_address(ip) + port.to_bytes(4, "big")).hex().upper()

    # -- positions -------------------------------------------------------------------------
    def min_offset(self) -> int:
        return self.queue.min_offset()

    @property
    def truncations(self) -> int:
        """Cuts so far that may bring a file back under a name it had (MappedFileQueue)."""
        return self.queue.truncations

    def max_offset(self) -> int:
        """End of the bytes readers may see (committed)."""
        return self.queue.max_offset()

    def max_wrote_offset(self) -> int:
        return self.queue.max_wrote_offset()

    @property
    def flushed_where(self) -> int:
        return self.queue.flushed_where

    # -- put ---------------------------------------------------------------------------------
    def put(self, record: EncodedRecord, topic: str, queue_id: int) -> AppendResult:
        """Append one encoded record. Raises CreateFileError when a new file is needed and
        cannot be created; nothing of the record is written then."""
        return self.put_batch(((record, topic, queue_id),))[0]

    def put_batch(self, records: Sequence[tuple[EncodedRecord, str, int]],
                  may_create: Callable[[int], None] | None = None,
                  window: DuplicateWindow | None = None, *,
                  repeats: bool = False) -> list[AppendResult]:
        """Append several records under one lock acquisition, all or nothing: every file the
        batch needs is created before the first byte is written. `may_create(n)`, when given,
        is asked first whenever the batch needs n new files, and may refuse by raising
        (NoRoomForFile).

        `window` (the store's duplicate window) enters what the batch appends, under this
        lock. With `repeats` (a client's send) it is asked first, under the same lock, so that
        of two sends of one id exactly one is written: a record that repeats a send it holds
        is not written and comes back as an OriginalAppend (the original's place); an id
        reused for another message raises MessageIllegal before anything is written."""
        for record, _, _ in records:
            if len(record.data) + codec.END_FILE_MIN_BLANK_LENGTH > self.file_size:
                raise ValueError(f"record of {len(record.data)} bytes cannot fit a commitlog "
                                 f"file of {self.file_size}")
        with self.put_lock:
            admission = window.admit(records) if repeats and window is not None else None
            if admission is not None and admission.originals is not None:
                return self._put_new_locked(records, admission.originals, may_create, window)
            appends = self._put_locked(records, may_create)
            if window is not None:
                window.appended(records, appends, admission)
            return appends

    def _put_new_locked(self, records: Sequence[tuple[EncodedRecord, str, int]],
                        originals: Sequence[Original | None],
                        may_create: Callable[[int], None] | None,
                        window: DuplicateWindow) -> list[AppendResult]:
        """put_batch of a batch some of whose records repeat sends the window holds: only the
        others are written (in one append), and each repeat gets its original's place."""
        new = [record for record, original in zip(records, originals) if original is None]
        written = self._put_locked(new, may_create) if new else []
        if written:
            window.appended(new, written)
        prefix = self._msg_id_prefix
        each = iter(written)
        return [next(each) if o is None else
                OriginalAppend(o.commit_log_offset, o.size, o.queue_offset, o.store_timestamp,
                               prefix) for o in originals]

    def _put_locked(self, records: Sequence[tuple[EncodedRecord, str, int]],
                    may_create: Callable[[int], None] | None) -> list[AppendResult]:
        needed = self._files_needed([len(r.data) for r, _, _ in records])
        if needed:
            if may_create is not None:
                may_create(needed)
            self.queue.prepare_files(needed)
        now = self.clock.now_ms()
        if now < self.last_store_timestamp:
            now = self.last_store_timestamp  # store time never goes backwards in the log
        if not needed:  # the whole batch fits the last file: one copy, one position update
            return self._append_in_file_locked(self.queue.last_file, records, now)
        return [self._append_locked(record, topic, queue_id, now)
                for record, topic, queue_id in records]

    def _files_needed(self, sizes: list[int]) -> int:
        last = self.queue.last_file
        remaining = last.remaining if last is not None else 0
        new_files = 0
        for n in sizes:
            if n + codec.END_FILE_MIN_BLANK_LENGTH > remaining:
                new_files += 1
                remaining = self.file_size
            remaining -= n
        return new_files

    def _append_locked(self, record: EncodedRecord, topic: str, queue_id: int, now: int) -> AppendResult:
        data = record.data
        n = len(data)
        f = self.queue.get_last_file_for_write()
        if n + codec.END_FILE_MIN_BLANK_LENGTH > f.remaining:
            self._append_blank(f)
            f = self.queue.get_last_file_for_write()
        key = (topic, queue_id)
        skip = record.transaction_type in _SKIP_QUEUE_OFFSET
        queue_offset = 0 if skip else self.topic_queue_table.get(key, 0)
        phy = f.file_from_offset + f.wrote_position
        record.patch(queue_offset, phy, now)
        hint = record.hint
        if hint is not None:
            hints = self.dispatch_hints
            if hints is not None and len(hints) < HINTS_MAX:
                # before the bytes: reput must not walk a record whose hint is still coming
                fill_hint(hint, phy, n, queue_offset, now)
                hints[phy] = hint
        self._write(f, (data,), now, phy)
        if not skip:
            self.topic_queue_table[key] = queue_offset + 1
        self.last_store_timestamp = now
        return AppendResult(phy, n, queue_offset, now, self._msg_id_prefix)

    def _append_in_file_locked(self, f: MappedFile,
                               records: Sequence[tuple[EncodedRecord, str, int]],
                               now: int) -> list[AppendResult]:
        """`_append_locked` for a batch that fits `f`: every record patched and its hint left
        first, then the bytes copied and made visible together (readers see nothing of the
        batch until `append_many` moves the file's position)."""
        phy = f.file_from_offset + f.wrote_position
        table = self.topic_queue_table
        nxt: dict[tuple[str, int], int] = {}  # the queues' next offsets, kept once the bytes are in
        hints = self.dispatch_hints
        prefix = self._msg_id_prefix
        results = []
        datas = []
        for record, topic, queue_id in records:
            data = record.data
            key = (topic, queue_id)
            skip = record.transaction_type in _SKIP_QUEUE_OFFSET
            queue_offset = 0 if skip else nxt.get(key) or table.get(key, 0)
            record.patch(queue_offset, phy, now)
            hint = record.hint
            if hint is not None and hints is not None and len(hints) < HINTS_MAX:
                fill_hint(hint, phy, len(data), queue_offset, now)
                hints[phy] = hint
            if not skip:
                nxt[key] = queue_offset + 1
            results.append(AppendResult(phy, len(data), queue_offset, now, prefix))
            datas.append(data)
            phy += len(data)
        self._write(f, datas, now, results[0].wrote_offset)
        table.update(nxt)
        self.last_store_timestamp = now
        return results

    def _write(self, f: MappedFile, datas: Sequence, now: int, phy: int) -> None:
        """The records' bytes into `f` at its end (`phy` in the log). A write that fails
        (DiskError) moves nothing and takes back the dispatch hints left for these records:
        reput must never find one for bytes that are not there."""
        try:
            f.append_many(datas, now)
        except DiskError:
            hints = self.dispatch_hints
            if hints is not None:
                for data in datas:  # one pop per record: reput pops from it meanwhile
                    hints.pop(phy, None)
                    phy += len(data)
            raise

    def _append_blank(self, f: MappedFile) -> None:
        remaining = f.remaining
        blank = codec.encode_blank(remaining)
        if f.write_through_mmap:
            f.append(blank)
            f.wrote_position = f.committed_position = f.file_size
        else:
            f.append(blank + bytes(remaining - len(blank)))

    # -- slave path ---------------------------------------------------------------------------
    def append_raw(self, offset: int, data) -> None:
        """Append replicated bytes verbatim at exactly the current end (never across files)."""
        with self.put_lock:
            end = self.max_wrote_offset()
            if self.queue.last_file is None:
                end = offset
            if offset != end:
                raise OffsetOutOfRange(f"raw append at {offset} but the commitlog ends at {end}")
            fresh = self.queue.last_file is None
            f = self.queue.get_last_file_for_write(offset)
            if fresh and offset > f.file_from_offset:
                f.set_positions(offset - f.file_from_offset)  # a replica starting mid-file
            if f.file_from_offset + f.wrote_position != offset:
                raise OffsetOutOfRange(f"raw append at {offset} but file {f.path} ends elsewhere")
            if len(data) > f.remaining:
                raise OffsetOutOfRange(f"raw append of {len(data)} bytes at {offset} crosses a file")
            f.append_many((data,), self.clock.now_ms())

    # -- reading -----------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes:
        """Bytes of [offset, offset+size) within one file, clipped at the readable end."""
        f = self.queue.find_by_offset(offset)
        if f is None or not f.hold():
            raise OffsetOutOfRange(f"offset {offset} is not in the commitlog "
                                   f"[{self.min_offset()}, {self.max_offset()})")
        try:
            return f.read(offset - f.file_from_offset, size)
        finally:
            f.release()

    def read_chunk(self, offset: int, max_bytes: int, end: int | None = None) -> bytes:
        """Up to max_bytes from offset, never crossing a file or `end` (replication slices)."""
        limit = self.max_offset() if end is None else min(end, self.max_offset())
        if offset >= limit:
            return b""
        f = self.queue.find_by_offset(offset)
        if f is None:
            raise OffsetOutOfRange(f"offset {offset} is not in the commitlog")
        size = min(max_bytes, limit - offset, f.file_from_offset + self.file_size - offset)
        if not f.hold():
            raise OffsetOutOfRange(f"offset {offset} is not in the commitlog")
        try:  # a copy of up to a MiB: pread lets the other threads run meanwhile
            return f.pread(offset - f.file_from_offset, size)
        finally:
            f.release()

    def get_message(self, offset: int, size: int | None = None,
                    check_crc: bool = True) -> codec.DecodeResult:
        with self.records() as records:
            return records.get(offset, size, check_crc)

    def records(self) -> "RecordReader":
        """A reader of records by offset that holds each file once for its run of records
        (close it, or use it as a context manager)."""
        return RecordReader(self.queue)

    def store_time_of(self, offset: int, size: int) -> int | None:
        """Store timestamp of the record at `offset`, or None when it is gone."""
        f = self.queue.find_by_offset(offset)
        if f is None or not f.hold():
            return None
        try:
            pos = offset - f.file_from_offset
            if pos + 64 > f.read_position:
                return None
            return codec.store_timestamp_at(f.view, pos)
        finally:
            f.release()

    def files(self) -> Iterable[MappedFile]:
        return self.queue.snapshot()

    # -- truncation ---------------------------------------------------------------------------
    def truncate(self, offset: int) -> None:
        """Crash-safely cut everything at and after `offset` (a record boundary)."""
        with self.put_lock:
            self.queue.truncate_to(offset)

    def close(self) -> None:
        self.queue.close()


class RecordReader:
    """Decodes commitlog records by offset for one caller (a run of reads: get_messages'
    loop), keeping the file of the last record held, so a run of records in one file costs one
    find and one hold, not one each. Owns that hold until close(); used by one thread."""
    __slots__ = ("_queue", "_file", "_start", "_end")

    def __init__(self, queue: MappedFileQueue) -> None:
        self._queue = queue
        self._file: MappedFile | None = None
        self._start = self._end = 0  # the held file's offsets

    def get(self, offset: int, size: int | None = None,
            check_crc: bool = True) -> codec.DecodeResult:
        """The record at `offset` (at most `size` bytes of it; None: up to the file's readable
        end). OffsetOutOfRange when no file holds it (deleted, not written yet)."""
        f = self._file
        if f is None or not self._start <= offset < self._end:
            self.close()
            f = self._queue.find_by_offset(offset)
            if f is None or not f.hold():
                raise OffsetOutOfRange(f"offset {offset} is not in the commitlog")
            self._file, self._start = f, f.file_from_offset
            self._end = self._start + f.file_size
        pos = offset - self._start
        limit = f.read_position if size is None else min(f.read_position, pos + size)
        return codec.decode(f.view, pos, limit, check_crc=check_crc)

    def close(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            f.release()

    def __enter__(self) -> "RecordReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""Consume queues: per topic-queue arrays of fixed 20-byte units pointing into the commitlog.

Files live under `<root>/<topic>/<queueId>/<20-digit byte offset of the first unit>`, each a
multiple of 20 bytes (RocketMQ default 300000 units), so queue index i sits at byte i*20.
Unit layout (`CQ_UNIT`, big-endian), identical to RocketMQ's ConsumeQueue:

    offset  size  field             notes
    ------  ----  ----------------  ---------------------------------------------------------
         0     8  commitLogOffset   i64, physical offset of the record
         8     4  size              i32, record size in bytes
        12     8  tagsCode          i64, tag hash (or delivery time on the schedule topic)
    total   20

A filler unit (0, 0x7FFFFFFF, 0) holds a place that has no record: the units before the first
one of a queue that starts mid-file (RocketMQ fillPreBlank) and gaps in a queue. A unit of all
zeros is "never written": recovery stops there.

Writing comes from the single reput thread; readers (get_unit, iter_units, min/max) run on
other threads. Readers never take the write lock: they copy bytes out of a file under
hold()/release(), and a unit becomes visible only when `wrote_position` moves past it, after
its bytes are in place.
"""
from __future__ import annotations

import logging
import os
import struct
import threading
import time
from typing import Callable, Iterator, Sequence

from store.codec.dispatch import DispatchRequest
from store.commitlog.fileio import DEFAULT_FILE_IO, FileIO
from store.commitlog.mapped_file import MappedFile
from store.commitlog.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

CQ_UNIT = struct.Struct(">qiq")  # commitLogOffset i64, size i32, tagsCode i64 (table above)
CQ_STORE_UNIT_SIZE = CQ_UNIT.size  # 20
DEFAULT_CQ_FILE_SIZE = 300_000 * CQ_STORE_UNIT_SIZE
FILLER_SIZE = 0x7FFFFFFF
FILLER_UNIT = CQ_UNIT.pack(0, FILLER_SIZE, 0)
DESTROY_INTERVAL_FORCIBLY_MS = 120_000  # RocketMQ destroyMapedFileIntervalForcibly

Unit = tuple[int, int, int]  # (commitLogOffset, size, tagsCode)


def pack_unit(phy_offset: int, size: int, tags_code: int) -> bytes:
    return CQ_UNIT.pack(phy_offset, size, tags_code)


def is_filler(unit: Unit) -> bool:
    return unit[0] == 0 and unit[1] == FILLER_SIZE


def is_valid(unit: Unit) -> bool:
    """RocketMQ's recovery rule: anything with offset >= 0 and size > 0 was written."""
    return unit[0] >= 0 and unit[1] > 0


def _units(raw: bytes) -> Iterator[Unit]:
    return CQ_UNIT.iter_unpack(memoryview(raw)[:len(raw) - len(raw) % CQ_STORE_UNIT_SIZE])


def _read_file(mf: MappedFile, start: int = 0, end: int | None = None) -> bytes:
    """Copy [start, end) of a file's readable bytes under hold(); b"" if it is going away."""
    if not mf.hold():
        return b""
    try:
        stop = mf.read_position if end is None else min(end, mf.read_position)
        return mf.read(start, stop - start) if stop > start else b""
    except ValueError:  # unmapped forcibly under our feet
        return b""
    finally:
        mf.release()


def _rev_units(mf: MappedFile, chunk: int = 4096,
               below: int | None = None) -> Iterator[tuple[int, Unit]]:
    """(unit number in the file, unit) from the last written unit (or the last one before
    byte `below`) down, read in chunks from the end: truncation, retention and the store
    export usually decide on the last few units of a file."""
    written = mf.read_position if below is None else min(below, mf.read_position)
    end = written // CQ_STORE_UNIT_SIZE
    while end > 0:
        start = max(0, end - chunk)
        raw = _read_file(mf, start * CQ_STORE_UNIT_SIZE, end * CQ_STORE_UNIT_SIZE)
        if len(raw) < (end - start) * CQ_STORE_UNIT_SIZE:
            return
        for i in range(end - start - 1, -1, -1):
            yield start + i, CQ_UNIT.unpack_from(raw, i * CQ_STORE_UNIT_SIZE)
        end = start


def bytes_before(mf: MappedFile, phy_offset: int, size: int) -> int:
    """How many of the first `size` bytes of `mf` hold units for records before `phy_offset`:
    units are in commitlog order, so those past it are a suffix, cut at the first real unit
    (not a filler) at or past `phy_offset`. The store export sends a queue as of a dispatch
    position with it."""
    kept = size - size % CQ_STORE_UNIT_SIZE
    # small chunks: the cut is usually within the last few units, and a file before it is
    # decided by its last unit alone (one export reads every queue file this way)
    for i, unit in _rev_units(mf, chunk=64, below=kept):
        if is_filler(unit) or not is_valid(unit):
            continue
        if unit[0] < phy_offset:
            break
        kept = i * CQ_STORE_UNIT_SIZE
    return kept


def _last_real(mf: MappedFile) -> Unit | None:
    for _, unit in _rev_units(mf):
        if is_valid(unit) and not is_filler(unit):
            return unit
    return None


class ConsumeQueue:
    """One topic-queue. `min_logic_offset` is a byte offset like RocketMQ's minLogicOffset;
    `max_physic_offset` is the commitlog end offset of the last dispatched record."""

    def __init__(self, topic: str, queue_id: int, root_dir: str,
                 file_size: int = DEFAULT_CQ_FILE_SIZE, io: FileIO = DEFAULT_FILE_IO) -> None:
        if file_size <= 0 or file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(f"consume queue file size {file_size} is not a multiple of 20")
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.directory = os.path.join(root_dir, topic, str(queue_id))
        self.mfq = MappedFileQueue(self.directory, file_size, io)
        self.max_physic_offset = 0
        self.min_logic_offset = 0
        self._write_lock = threading.RLock()

    def load(self) -> list[str]:
        return self.mfq.load()

    # -- reading ---------------------------------------------------------------------------
    def max_offset(self) -> int:
        """The next queue index to write (0 for a queue without files)."""
        return self.mfq.max_offset() // CQ_STORE_UNIT_SIZE

    def min_offset(self) -> int:
        first = self.mfq.first_file
        if first is None:
            return 0
        return min(max(self.min_logic_offset, first.file_from_offset) // CQ_STORE_UNIT_SIZE,
                   self.max_offset())

    def _read_unit(self, index: int) -> Unit | None:
        """The raw unit at `index` (fillers included), None when not stored."""
        pos = index * CQ_STORE_UNIT_SIZE
        mf = self.mfq.find_by_offset(pos) if index >= 0 else None
        if mf is None:
            return None
        rel = pos - mf.file_from_offset
        raw = _read_file(mf, rel, rel + CQ_STORE_UNIT_SIZE)
        return CQ_UNIT.unpack(raw) if len(raw) == CQ_STORE_UNIT_SIZE else None

    def get_unit(self, index: int) -> Unit | None:
        """(commitLogOffset, size, tagsCode) at a queue index in [min_offset, max_offset),
        None outside it or for a filler unit."""
        if index < self.min_offset():
            return None
        unit = self._read_unit(index)
        return None if unit is None or is_filler(unit) or not is_valid(unit) else unit

    def iter_units(self, start_index: int, max_count: int) -> Iterator[tuple[int, int, int, int]]:
        """Yield up to max_count (index, commitLogOffset, size, tagsCode) from start_index on,
        skipping fillers. Bytes are copied per file, so no file is held across a yield."""
        index = max(start_index, self.min_offset())
        produced = 0
        while produced < max_count and index < self.max_offset():
            pos = index * CQ_STORE_UNIT_SIZE
            mf = self.mfq.find_by_offset(pos)
            if mf is None:
                return
            rel = pos - mf.file_from_offset
            want = max(64, max_count - produced) * CQ_STORE_UNIT_SIZE
            raw = _read_file(mf, rel, rel + want)
            if not raw:
                return
            for unit in _units(raw):
                if is_valid(unit) and not is_filler(unit):
                    yield (index, *unit)
                    produced += 1
                    if produced >= max_count:
                        return
                index += 1

    def _next_real(self, index: int, end: int) -> tuple[int, Unit | None]:
        """The first non-filler unit at or after `index` and below `end`."""
        while index < end:
            unit = self._read_unit(index)
            if unit is None:
                return end, None
            if not is_filler(unit):
                return index, unit
            index += 1
        return end, None

    def offset_for_timestamp(self, timestamp: int,
                             store_time_of: Callable[[int, int], int | None]) -> int:
        """Index of the first unit stored at or after `timestamp`; max_offset() when every unit
        is older. Binary search like RocketMQ getOffsetInQueueByTime, but over the whole queue
        and with "first >= ts" semantics. store_time_of(phy, size) reads the commitlog; None
        (record gone by retention) counts as older than any timestamp. A filler takes the
        verdict of the next real unit, which keeps the predicate monotonic."""
        lo, hi = self.min_offset(), self.max_offset()
        end = hi
        while lo < hi:
            mid = (lo + hi) // 2
            j, unit = self._next_real(mid, hi)
            if unit is None:
                hi = mid  # only fillers up to hi: the answer lies before them
                continue
            t = store_time_of(unit[0], unit[1])
            if t is not None and t >= timestamp:
                hi = mid
            else:
                lo = j + 1
        return self._next_real(lo, end)[0]

    # -- writing ---------------------------------------------------------------------------
    def put(self, request: DispatchRequest) -> None:
        """Write the unit of `request` at index request.consume_queue_offset."""
        index = request.consume_queue_offset
        unit = CQ_UNIT.pack(request.commit_log_offset, request.msg_size, request.tags_code)
        with self._write_lock:
            last = self._tail_for(index, 1)
            if last is not None:
                last.append(unit)
                self.max_physic_offset = request.commit_log_offset + request.msg_size
                return
            if not self.mfq.files:
                self._create_first(index)
            expected = self.max_offset()
            if index < expected:
                self._on_repeat(index, unit, request)
                return
            if index > expected:
                if index - expected > max(2 * self.mfq.file_size // CQ_STORE_UNIT_SIZE, 1024):
                    # A queue offset this far ahead comes from a damaged record (its queue
                    # offset is outside the body CRC). Filling the gap could create thousands
                    # of files; like RocketMQ, write it at the expected position instead.
                    log.error("%s-%d: queue offset %d is far beyond the expected %d (damaged "
                              "record at phy %d?); written at %d", self.topic, self.queue_id,
                              index, expected, request.commit_log_offset, expected)
                else:
                    log.warning("%s-%d: queue offset %d but %d expected; filling the gap",
                                self.topic, self.queue_id, index, expected)
                    self._append_fillers(index - expected)
            self.mfq.get_last_file_for_write().append(unit)
            self.max_physic_offset = request.commit_log_offset + request.msg_size

    def put_run(self, requests: Sequence[DispatchRequest]) -> None:
        """put() of consecutive requests for this queue, in commitlog order (a batch sent in
        one request lands in one queue). When they are the units right after the last one
        and fit in the last file, they are packed and appended in one write: one lock, one
        check and one copy instead of one per message. Anything else goes through put()."""
        first = requests[0].consume_queue_offset
        pack = CQ_UNIT.pack
        with self._write_lock:
            last = self._tail_for(first, len(requests))
            if last is not None:
                units = []
                for i, r in enumerate(requests):
                    if r.consume_queue_offset != first + i:
                        break
                    units.append(pack(r.commit_log_offset, r.msg_size, r.tags_code))
                else:
                    last.append(b"".join(units))
                    end = requests[-1]
                    self.max_physic_offset = end.commit_log_offset + end.msg_size
                    return
            for r in requests:
                self.put(r)

    def _tail_for(self, index: int, count: int) -> MappedFile | None:
        """The last file, when `count` units from queue index `index` are the next ones and
        fit in it: the common case of reput, written without put()'s general path (its
        lookups, gaps and repeats). Call under the write lock."""
        files = self.mfq.files
        if not files:
            return None
        last = files[-1]
        if (last.wrote_position + count * CQ_STORE_UNIT_SIZE <= last.file_size
                and index * CQ_STORE_UNIT_SIZE == last.file_from_offset + last.read_position):
            return last
        return None

    def _create_first(self, index: int) -> None:
        """First file of an empty queue, at the file boundary below `index`; the units before
        `index` in it become fillers (RocketMQ fillPreBlank), so recovery's scan from the file
        start reads them as written and does not stop at a zero unit."""
        pos = index * CQ_STORE_UNIT_SIZE
        mf = self.mfq.get_last_file_for_write(pos)
        self.min_logic_offset = pos
        self._append_fillers((pos - mf.file_from_offset) // CQ_STORE_UNIT_SIZE)

    def _append_fillers(self, count: int) -> None:
        while count > 0:
            mf = self.mfq.get_last_file_for_write()
            n = min(count, mf.remaining // CQ_STORE_UNIT_SIZE)
            mf.append(FILLER_UNIT * n)
            count -= n

    def _on_repeat(self, index: int, unit: bytes, request: DispatchRequest) -> None:
        existing = self._read_unit(index)
        if existing is not None and pack_unit(*existing) == unit:
            return  # re-dispatch of the same record after an abnormal restart
        if request.commit_log_offset < self.max_physic_offset:
            log.warning("%s-%d: build consume queue repeatedly at %d (phy %d < %d), skipped",
                        self.topic, self.queue_id, index, request.commit_log_offset,
                        self.max_physic_offset)
            return
        log.error("%s-%d: queue offset %d already holds %s, record at phy %d not written",
                  self.topic, self.queue_id, index, existing, request.commit_log_offset)

    # -- recovery and truncation -----------------------------------------------------------
    def recover(self) -> None:
        """Scan from the third-last file up to the first unit never written, cut there and
        set max_physic_offset. A tail that is not all zeros (a crash wrote later pages before
        earlier ones) is cut crash-safely so it can never be mistaken for units later."""
        with self._write_lock:
            files = self.mfq.snapshot()
            if not files:
                return
            process = files[max(0, len(files) - 3)].file_from_offset
            for mf in files[max(0, len(files) - 3):]:
                valid = 0
                for unit in _units(_read_file(mf)):
                    if not is_valid(unit):
                        break
                    valid += 1
                    if not is_filler(unit):
                        self.max_physic_offset = unit[0] + unit[1]
                process = mf.file_from_offset + valid * CQ_STORE_UNIT_SIZE
                if valid * CQ_STORE_UNIT_SIZE < self.file_size:
                    break
            self._cut_tail(process)
            self._correct_min(0)

    def _cut_tail(self, offset: int) -> None:
        mf = self.mfq.find_by_offset(offset)
        later = self.mfq.last_file is not mf
        if mf is not None and not later:
            rel = offset - mf.file_from_offset
            tail = _read_file(mf, rel)
            if tail.count(0) == len(tail):
                mf.set_positions(rel)  # already zeros on disk: no sync needed
                return
        if offset < self.mfq.max_wrote_offset():
            self.mfq.truncate_to(offset)

    def truncate_dirty(self, phy_offset: int) -> None:
        """Cut every unit whose commitLogOffset >= phy_offset. Units are in commitlog order, so
        they form a suffix; fillers directly before it stay. truncate_to zeroes and syncs the
        cut before deleting later files; should a crash leave some of those, recovery must
        call truncate_dirty(commitlog end) after recover(), as RocketMQ does."""
        with self._write_lock:
            cut: int | None = None
            kept_end = 0
            for mf in reversed(self.mfq.snapshot()):
                base = mf.file_from_offset // CQ_STORE_UNIT_SIZE
                for i, unit in _rev_units(mf):
                    if is_filler(unit) or not is_valid(unit):
                        continue
                    if unit[0] >= phy_offset:
                        cut = base + i
                    else:
                        kept_end = unit[0] + unit[1]
                        break
                else:
                    continue
                break
            self.max_physic_offset = kept_end
            if cut is None:
                return
            self.mfq.truncate_to(cut * CQ_STORE_UNIT_SIZE)
            self.min_logic_offset = min(self.min_logic_offset, cut * CQ_STORE_UNIT_SIZE)

    # -- retention -------------------------------------------------------------------------
    def correct_min_offset(self, min_phy_offset: int) -> None:
        """After commitlog retention: min_logic_offset -> first unit with phy >= min_phy."""
        with self._write_lock:
            self._correct_min(min_phy_offset)

    def _correct_min(self, min_phy_offset: int) -> None:
        files = self.mfq.snapshot()
        for mf in files:
            last = _last_real(mf)
            if last is None or last[0] < min_phy_offset:
                continue  # the whole file is behind: skip it without scanning every unit
            for i, unit in enumerate(_units(_read_file(mf))):
                if is_valid(unit) and not is_filler(unit) and unit[0] >= min_phy_offset:
                    self.min_logic_offset = mf.file_from_offset + i * CQ_STORE_UNIT_SIZE
                    return
        if files:  # nothing left that is still in the commitlog: the queue is logically empty
            self.min_logic_offset = self.mfq.max_offset()

    def delete_expired_files(self, min_phy_offset: int, *, now_ms: int | None = None,
                             interval_forcibly_ms: int = DESTROY_INTERVAL_FORCIBLY_MS) -> int:
        """Delete whole files (never the last) whose last unit points below min_phy_offset.
        Files still read by others are retried on the next call. Returns the count deleted."""
        def expired(mf: MappedFile) -> bool:
            last = _last_real(mf)
            return last is None or last[0] < min_phy_offset

        with self._write_lock:
            now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
            deleted = self.mfq.delete_first_files(expired, len(self.mfq), interval_forcibly_ms,
                                                  now)
            self._correct_min(min_phy_offset)
            return len(deleted)

    # -- lifecycle -------------------------------------------------------------------------
    def flush(self, least_pages: int = 0) -> int:
        """Flush dirty units; returns the flushed byte offset. Raises DiskError."""
        return self.mfq.flush(least_pages)

    def close(self) -> None:
        self.mfq.close()

    def destroy(self) -> None:
        with self._write_lock:
            self.mfq.delete_all()
            self.max_physic_offset = self.min_logic_offset = 0

    def __repr__(self) -> str:
        return (f"ConsumeQueue({self.topic}-{self.queue_id}, min={self.min_offset()}, "
                f"max={self.max_offset()}, maxPhy={self.max_physic_offset})")

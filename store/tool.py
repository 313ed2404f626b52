"""The store tool: `python -m store <command> ...` (console script `rmq-store`).

Read-only commands (never take the `lock`, never recover, never write a byte; they work on a
running store and on copies):

    inspect DIR [--json]                     files, offsets, consume queues, index, checkpoint
    dump DIR [--topic T] [--queue N] [--from OFFSET] [--limit N] [--json] [--body]
    verify DIR [--json] [--progress] [--index-sample N]
                                             CRC of every record, consume queue and index
                                             consistency; exit 0 clean, 1 damage, 2 usage

Commands that open the store (MessageStore load/start, clean shutdown):

    put DIR --topic T [--queue N] [--tag X] [--keys "a b"] [--body TEXT | --body-file F] [--count N]
    get DIR --topic T --queue N [--offset O] [--count N] [--tag-filter "a||b"]
    demo DIR --messages N [--file-size BYTES]

The read-only side is `StoreReader`: it maps the files with mmap ACCESS_READ and learns every
size from the files themselves (commitlog file size = size of the first file, consume queue file
size from each queue's files, index geometry from the index file size and header), so no
configuration is needed. Records are checked and decoded by `store.codec` only.
"""
from __future__ import annotations

import argparse
import base64
import json
import logging
import mmap
import os
import random
import shlex
import struct
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from . import codec
from .checkpoint import StoreCheckpoint
from .codec import Message, MessageRecord, RecordKind
from .config import FIELD_BY_KEY, StoreConfig, key_for, load_config_file, parse_properties
from .dispatch import SCHEDULE_TOPIC, build_request
from .errors import ConfigError, StoreError
from .consume_queue import CQ_STORE_UNIT_SIZE as CQ_UNIT_SIZE, CQ_UNIT, FILLER_SIZE as CQ_FILLER_SIZE
from .index_file import (HASH_SLOT, HASH_SLOT_SIZE, INDEX_ENTRY, INDEX_ENTRY_SIZE, INDEX_HEADER,
                         INDEX_HEADER_SIZE, index_key_hash)
from .index_service import build_key
from .reader import TagFilter

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_DAMAGE = 1  # verify found damage, or an operation on the store failed
EXIT_USAGE = 2  # bad arguments, not a store directory, bad config

# Sizes the tool uses for a store it creates (put into an empty directory, demo), unless the
# config file names them: small files so a demo has several of each.
TOOL_COMMIT_LOG_FILE_SIZE = 4 * 1024 * 1024
TOOL_CQ_FILE_SIZE = 30_000 * 20
TOOL_INDEX_SLOTS = 50_000
TOOL_INDEX_NUM = 4 * TOOL_INDEX_SLOTS

_I64 = struct.Struct(">q")
_ZERO_UNIT = (0, 0, 0)

DEMO_TOPICS = ("DemoOrders", "DemoPayments", "DemoAudit")
DEMO_QUEUES = 4
DEMO_TAGS = ("TagA", "TagB", "TagC")


class UsageError(Exception):
    """A problem with what the user asked for (exit code 2)."""


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------
def iso_ms(ms: int | None) -> str | None:
    """Local ISO-8601 time of epoch milliseconds; None for 0 / absurd values."""
    if not ms or ms <= 0:
        return None
    try:
        return (datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone()
                .isoformat(timespec="milliseconds"))
    except (OverflowError, OSError, ValueError):
        return None


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def parse_size(text: str) -> int:
    """'4194304', '4M', '4MiB', '512k', '1G' -> bytes."""
    t = text.strip().lower().replace("_", "")
    for suffix in ("ib", "b"):
        if t.endswith(suffix) and t[:-len(suffix)][-1:].isalpha():
            t = t[:-len(suffix)]
            break
    mult = 1
    if t[-1:] in ("k", "m", "g", "t"):
        mult = 1024 ** ("kmgt".index(t[-1]) + 1)
        t = t[:-1]
    try:
        value = int(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4194304, 4M, 512K)")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def _nonneg_int(text: str) -> int:
    try:
        v = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return v


def _pos_int(text: str) -> int:
    v = _nonneg_int(text)
    if v == 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return v


def body_preview(body: bytes, limit: int = 60) -> str:
    text = body[:limit * 4].decode("utf-8", "replace")
    text = "".join(c if c.isprintable() else "." for c in text)
    return text[:limit] + ("..." if len(text) > limit or len(body) > limit * 4 else "")


def _emit(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def _err(line: str) -> None:
    sys.stderr.write(line + "\n")


def _json_line(obj: Any) -> None:
    _emit(json.dumps(obj, ensure_ascii=False, sort_keys=False))


def _table(headers: list[str], rows: list[list[Any]], right: set[int] = frozenset()) -> list[str]:
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, v in enumerate(row):
            widths[i] = max(widths[i], len(v))

    def fmt(row: list[str]) -> str:
        return "  ".join(v.rjust(widths[i]) if i in right else v.ljust(widths[i])
                         for i, v in enumerate(row)).rstrip()

    return [fmt(headers)] + [fmt(r) for r in cells]


class Progress:
    """Rate-limited progress on stderr (about once a second), only when enabled."""

    def __init__(self, enabled: bool, interval: float = 1.0) -> None:
        self.enabled = enabled
        self.interval = interval
        self._last = time.monotonic()
        self._shown = False
        self._tty = enabled and _isatty(sys.stderr)

    def update(self, text: Callable[[], str]) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        self._shown = True
        if self._tty:
            sys.stderr.write("\r\x1b[K" + text())
        else:
            sys.stderr.write(text() + "\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self._shown and self._tty:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
        self._shown = False


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _progress_enabled(args) -> bool:
    return bool(getattr(args, "progress", False)) or _isatty(sys.stderr)


# ---------------------------------------------------------------------------------------------
# read-only access to a store directory
# ---------------------------------------------------------------------------------------------
class ROFile:
    """One store file, mapped read-only on first use (never written, never locked)."""

    def __init__(self, path: str, base: int) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.base = base
        self.size = os.path.getsize(path)
        self._fh = None
        self._mm: mmap.mmap | None = None
        self._view: memoryview | None = None

    @property
    def end(self) -> int:
        return self.base + self.size

    @property
    def view(self) -> memoryview:
        if self._view is None:
            if self.size == 0:
                self._view = memoryview(b"")
            else:
                self._fh = open(self.path, "rb")
                self._mm = mmap.mmap(self._fh.fileno(), self.size, access=mmap.ACCESS_READ)
                self._view = memoryview(self._mm)
        return self._view

    def close(self) -> None:
        view, mm, fh = self._view, self._mm, self._fh
        self._view = self._mm = self._fh = None
        try:
            if view is not None:
                view.release()
            if mm is not None:
                mm.close()
        except BufferError:  # a slice still alive somewhere: the GC unmaps it later
            pass
        if fh is not None:
            fh.close()

    def last_nonzero(self, start: int = 0, end: int | None = None) -> int:
        """1 + position of the last non-zero byte in [start, end), or start if all zero."""
        end = self.size if end is None else min(end, self.size)
        view = self.view
        chunk = 1 << 20
        pos = end
        while pos > start:
            lo = max(start, pos - chunk)
            data = view[lo:pos].tobytes().rstrip(b"\0")
            if data:
                return lo + len(data)
            pos = lo
        return start

    def nonzero_stats(self, start: int) -> tuple[int, int | None]:
        """(count of non-zero bytes in [start, size), position of the first one or None)."""
        view = self.view
        count = 0
        first = None
        pos = start
        chunk = 1 << 20
        while pos < self.size:
            data = view[pos:min(self.size, pos + chunk)].tobytes()
            zeros = data.count(0)
            if zeros != len(data):
                count += len(data) - zeros
                if first is None:
                    first = pos + len(data) - len(data.lstrip(b"\0"))
            pos += len(data)
        return count, first


def _numbered_files(directory: str, digits: int) -> list[tuple[str, int]]:
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for n in names:
        path = os.path.join(directory, n)
        if len(n) == digits and n.isdigit() and os.path.isfile(path):
            out.append((path, int(n)))
    return sorted(out, key=lambda x: x[1])


@dataclass
class ScanResult:
    """How far a commitlog scan got and why it stopped."""

    start: int = 0
    valid_end: int = 0
    records: int = 0
    bytes: int = 0
    stop_kind: RecordKind | None = None  # None: ran to the end of the last file
    stop_reason: str = ""
    gap: tuple[int, int] | None = None  # (expected file offset, found file offset)
    blank_mismatches: list[tuple[int, int, int]] = field(default_factory=list)  # (offset, size, expected)
    offset_mismatches: list[tuple[int, int]] = field(default_factory=list)  # (offset, stored field)
    offset_mismatch_count: int = 0


class QueueFiles:
    """The files of one consume queue, read-only."""

    def __init__(self, topic: str, queue_id: int, directory: str) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory
        self.files = [ROFile(p, b) for p, b in _numbered_files(directory, 20)]
        self.files = [f for f in self.files if f.size > 0]
        self.file_size = self.files[0].size if self.files else 0

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.queue_id}"

    def close(self) -> None:
        for f in self.files:
            f.close()

    def file_for(self, pos: int) -> ROFile | None:
        files = self.files
        if not files or pos < files[0].base:
            return None
        if self.file_size:
            i = (pos - files[0].base) // self.file_size
            if 0 <= i < len(files) and files[i].base <= pos < files[i].end:
                return files[i]
        for f in files:  # irregular layout (gaps, odd sizes)
            if f.base <= pos < f.end:
                return f
        return None

    def unit(self, index: int) -> tuple[int, int, int] | None:
        """The raw unit at a queue index, None when no file holds it."""
        pos = index * CQ_UNIT_SIZE
        f = self.file_for(pos)
        if f is None or pos - f.base + CQ_UNIT_SIZE > f.size:
            return None
        return CQ_UNIT.unpack_from(f.view, pos - f.base)

    def written_end(self, f: ROFile) -> int:
        """Bytes of `f` up to its last non-zero unit (a multiple of 20)."""
        end = f.last_nonzero(0, f.size - f.size % CQ_UNIT_SIZE)
        return -(-end // CQ_UNIT_SIZE) * CQ_UNIT_SIZE

    def max_offset(self) -> int:
        """One past the last written unit (RocketMQ maxOffsetInQueue)."""
        for f in reversed(self.files):
            end = self.written_end(f)
            if end:
                return (f.base + end) // CQ_UNIT_SIZE
        return self.files[0].base // CQ_UNIT_SIZE if self.files else 0

    def iter_units(self, f: ROFile) -> Iterator[tuple[int, tuple[int, int, int]]]:
        """(index, unit) of every unit slot of `f` up to its last non-zero unit."""
        end = self.written_end(f)
        base_index = f.base // CQ_UNIT_SIZE
        view = f.view
        for i, unit in enumerate(CQ_UNIT.iter_unpack(view[:end])):
            yield base_index + i, unit

    def last_real(self) -> tuple[int, tuple[int, int, int]] | None:
        """The last unit that is neither a filler nor unwritten."""
        for f in reversed(self.files):
            end = self.written_end(f)
            view = f.view
            for pos in range(end - CQ_UNIT_SIZE, -1, -CQ_UNIT_SIZE):
                unit = CQ_UNIT.unpack_from(view, pos)
                if unit[0] >= 0 and unit[1] > 0 and unit[1] != CQ_FILLER_SIZE:
                    return (f.base + pos) // CQ_UNIT_SIZE, unit
        return None

    def min_offset(self, min_phy: int) -> int:
        """First unit that is real and still in the commitlog (RocketMQ minOffsetInQueue)."""
        for f in self.files:
            for index, unit in self.iter_units(f):
                if unit[0] >= min_phy and unit[1] > 0 and unit[1] != CQ_FILLER_SIZE:
                    return index
        return self.max_offset()


@dataclass
class IndexHeader:
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


class IndexReader:
    """One index file, read-only. The geometry (hash slots, max entries) is not stored in the
    file; it is inferred from the size and checked against the header (see infer_geometry)."""

    def __init__(self, path: str) -> None:
        self.file = ROFile(path, 0)
        self.name = self.file.name
        self.path = path
        self.size = self.file.size
        self.header: IndexHeader | None = None
        self.slots: int | None = None
        self.max_entries: int | None = None
        if self.size >= INDEX_HEADER_SIZE:
            self.header = IndexHeader(*INDEX_HEADER.unpack_from(self.file.view, 0))
            geo = infer_index_geometry(self.size, self.header, self.file.view)
            if geo is not None:
                self.slots, self.max_entries = geo

    @property
    def index_count(self) -> int:
        if self.header is None:
            return 1
        count = max(self.header.index_count, 1)
        return min(count, self.max_entries) if self.max_entries else count

    @property
    def entries(self) -> int:
        return self.index_count - 1

    def close(self) -> None:
        self.file.close()

    def lookup(self, full_key: str) -> Iterator[int]:
        """Physical offsets whose entry hash equals the key's (newest first)."""
        if self.slots is None or self.header is None:
            return
        view = self.file.view
        key_hash = index_key_hash(full_key)
        count = self.index_count
        entries_at = INDEX_HEADER_SIZE + self.slots * 4
        n = HASH_SLOT.unpack_from(view, INDEX_HEADER_SIZE + (key_hash % self.slots) * HASH_SLOT_SIZE)[0]
        steps = 0
        while 0 < n < count and steps < count:
            h, phy, _diff, prev = INDEX_ENTRY.unpack_from(view, entries_at + n * INDEX_ENTRY_SIZE)
            if h == key_hash:
                yield phy
            if prev <= 0 or prev >= n:
                return
            n = prev
            steps += 1


def _index_entries_match(view, slots: int, num: int, header: IndexHeader) -> bool:
    count = header.index_count
    if count <= 1:
        return True
    if count > num:
        return False
    entries_at = INDEX_HEADER_SIZE + slots * 4
    try:
        first = INDEX_ENTRY.unpack_from(view, entries_at + INDEX_ENTRY_SIZE)
        last = INDEX_ENTRY.unpack_from(view, entries_at + (count - 1) * INDEX_ENTRY_SIZE)
    except struct.error:
        return False
    return (first[1] == header.begin_phy_offset and last[1] == header.end_phy_offset
            and first[0] >= 0 and last[0] >= 0 and first[2] >= 0 and last[2] >= 0
            and 0 <= last[3] < count - 1)


def infer_index_geometry(size: int, header: IndexHeader, view,
                         hint: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """(maxHashSlotNum, maxIndexNum) of an index file of `size` bytes: the hint if it fits,
    else RocketMQ's ratio maxIndexNum = 4 * maxHashSlotNum, else a search for the geometry
    whose first and last entries agree with the header's begin/end physical offsets."""
    body = size - INDEX_HEADER_SIZE
    if body <= 0:
        return None
    candidates = []
    if hint is not None and INDEX_HEADER_SIZE + hint[0] * 4 + hint[1] * INDEX_ENTRY_SIZE == size:
        candidates.append(hint)
    if body % 84 == 0:
        candidates.append((body // 84, 4 * (body // 84)))
    for slots, num in candidates:
        if slots > 0 and num >= 2 and _index_entries_match(view, slots, num, header):
            return slots, num
    if header.index_count <= 1:
        return candidates[0] if candidates else None
    if body % 4:
        return None
    # 4 * slots + 20 * num == body  =>  slots = body/4 - 5 * num
    quarter = body // 4
    num = header.index_count
    tries = 0
    while True:
        slots = quarter - 5 * num
        if slots < max(1, header.hash_slot_count) or tries > 5_000_000:
            return None
        if _index_entries_match(view, slots, num, header):
            return slots, num
        num += 1
        tries += 1


class StoreReader:
    """Read-only view of a store directory: commitlog, consume queues, index, checkpoint and
    markers. Opens nothing for writing, takes no lock, recovers nothing."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        if not os.path.isdir(self.root):
            raise UsageError(f"{root}: no such directory")
        self.commitlog_dir = os.path.join(self.root, "commitlog")
        self.cq_dir = os.path.join(self.root, "consumequeue")
        self.index_dir = os.path.join(self.root, "index")
        if not (os.path.isdir(self.commitlog_dir) or os.path.isdir(self.cq_dir)):
            raise UsageError(f"{root}: not a store directory (no commitlog/ or consumequeue/)")
        self.commitlog_files = [ROFile(p, b) for p, b in _numbered_files(self.commitlog_dir, 20)]
        self.file_size = self.commitlog_files[0].size if self.commitlog_files else 0
        self._queues: list[QueueFiles] | None = None
        self._index: list[IndexReader] | None = None
        self.live = os.path.exists(os.path.join(self.root, "abort"))

    def __enter__(self) -> "StoreReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for f in self.commitlog_files:
            f.close()
        for q in self._queues or ():
            q.close()
        for i in self._index or ():
            i.close()

    # -- markers and checkpoint ---------------------------------------------------------------
    @property
    def abort_exists(self) -> bool:
        return os.path.exists(os.path.join(self.root, "abort"))

    def lock_pid(self) -> int | None:
        """The pid written by the last holder of `lock` (the flock itself is not probed)."""
        try:
            with open(os.path.join(self.root, "lock"), "rb") as fh:
                return int(fh.read(64).decode("ascii").strip())
        except (OSError, ValueError, UnicodeDecodeError):
            return None

    def checkpoint(self) -> StoreCheckpoint:
        return StoreCheckpoint.load(os.path.join(self.root, "checkpoint"))

    # -- commitlog -------------------------------------------------------------------------
    def min_offset(self) -> int:
        return self.commitlog_files[0].base if self.commitlog_files else 0

    def files_end(self) -> int:
        return self.commitlog_files[-1].end if self.commitlog_files else 0

    def file_for(self, offset: int) -> ROFile | None:
        files = self.commitlog_files
        if not files or offset < files[0].base:
            return None
        if self.file_size:
            i = (offset - files[0].base) // self.file_size
            if 0 <= i < len(files) and files[i].base <= offset < files[i].end:
                return files[i]
        for f in files:
            if f.base <= offset < f.end:
                return f
        return None

    def record_at(self, offset: int, size: int | None = None, check_crc: bool = True,
                  read_body: bool = True) -> codec.DecodeResult | None:
        f = self.file_for(offset)
        if f is None:
            return None
        pos = offset - f.base
        limit = f.size if size is None else min(f.size, pos + size)
        return codec.decode(f.view, pos, limit, check_crc=check_crc, read_body=read_body)

    def scan(self, start: int | None = None, *, check_crc: bool = True,
             result: ScanResult | None = None,
             progress: Callable[[int], None] | None = None) -> Iterator[tuple[int, ROFile, int, int]]:
        """Walk the records from `start` (default: the first file; a position inside a file
        starts at that file's beginning and skips the records before it). Yields
        (offset, file, position in file, size) of each valid record. `result` receives the
        valid end and why the walk stopped."""
        res = result if result is not None else ScanResult()
        files = self.commitlog_files
        if not files:
            return
        first = 0
        if start is not None and start > files[0].base:
            f = self.file_for(start)
            if f is None:
                res.start = res.valid_end = start
                return
            first = files.index(f)
        res.start = files[first].base
        expected = files[first].base
        for f in files[first:]:
            if f.base != expected:
                res.gap = (expected, f.base)
                res.valid_end = expected
                res.stop_kind = RecordKind.CORRUPT
                res.stop_reason = f"file {f.name} does not follow the previous file (expected offset {expected})"
                return
            view, size, base = f.view, f.size, f.base
            pos = 0
            while pos < size:
                kind, n = codec.check_record(view, pos, size, check_crc)
                if kind is not RecordKind.RECORD and kind is not RecordKind.BLANK and self.live:
                    # A running store may be copying this record right now: look again.
                    for _ in range(3):
                        if kind is RecordKind.EMPTY:
                            break
                        time.sleep(0.05)
                        kind, n = codec.check_record(view, pos, size, check_crc)
                        if kind is RecordKind.RECORD:
                            break
                if kind is RecordKind.RECORD:
                    stored = _I64.unpack_from(view, pos + codec.PHYSICAL_OFFSET_POS)[0]
                    if stored != base + pos:
                        res.offset_mismatch_count += 1
                        if len(res.offset_mismatches) < 20:
                            res.offset_mismatches.append((base + pos, stored))
                    if start is None or base + pos >= start:
                        res.records += 1
                        res.bytes += n
                        yield base + pos, f, pos, n
                    pos += n
                elif kind is RecordKind.BLANK:
                    if n != size - pos:
                        res.blank_mismatches.append((base + pos, n, size - pos))
                    pos = size
                else:
                    res.valid_end = base + pos
                    res.stop_kind = kind
                    res.stop_reason = _stop_reason(view, pos, size, kind, check_crc)
                    return
            expected = base + size
            if progress is not None:
                progress(expected)
        res.valid_end = expected

    def valid_end(self) -> int:
        """Quick end of the commitlog: scan (no CRC) from the last file that holds data."""
        files = self.commitlog_files
        if not files:
            return 0
        start = files[0].base
        for f in reversed(files):
            if f.size >= 8 and any(f.view[0:8]):
                start = f.base
                break
        res = ScanResult()
        for _ in self.scan(start, check_crc=False, result=res):
            pass
        return res.valid_end

    # -- consume queues ------------------------------------------------------------------------
    def queues(self) -> list[QueueFiles]:
        if self._queues is None:
            out = []
            try:
                topics = sorted(os.listdir(self.cq_dir))
            except (FileNotFoundError, NotADirectoryError):
                topics = []
            for topic in topics:
                tdir = os.path.join(self.cq_dir, topic)
                if not os.path.isdir(tdir):
                    continue
                qids = sorted(int(q) for q in os.listdir(tdir)
                              if q.isdigit() and os.path.isdir(os.path.join(tdir, q)))
                for qid in qids:
                    out.append(QueueFiles(topic, qid, os.path.join(tdir, str(qid))))
            self._queues = out
        return self._queues

    def queue(self, topic: str, queue_id: int) -> QueueFiles | None:
        for q in self.queues():
            if q.topic == topic and q.queue_id == queue_id:
                return q
        return None

    # -- index ---------------------------------------------------------------------------
    def index_files(self) -> list[IndexReader]:
        if self._index is None:
            self._index = [IndexReader(p) for p, _ in _numbered_files(self.index_dir, 17)]
        return self._index


def _stop_reason(view, pos: int, size: int, kind: RecordKind, check_crc: bool) -> str:
    if kind is RecordKind.EMPTY:
        return "end of data (zero header)"
    res = codec.decode(view, pos, size, check_crc=check_crc, read_body=False)
    if isinstance(res, codec.Corrupt):
        return res.reason
    if isinstance(res, codec.NeedMore):
        return f"torn record: needs {res.needed} bytes, {res.available} left in the file"
    return kind.name.lower()


def _tail_after(reader: StoreReader, offset: int) -> tuple[int, int | None, int]:
    """(non-zero bytes at or after `offset`, first such offset, total bytes after `offset`)."""
    count = 0
    first = None
    for f in reader.commitlog_files:
        if f.end <= offset:
            continue
        start = max(0, offset - f.base)
        n, pos = f.nonzero_stats(start)
        count += n
        if first is None and pos is not None:
            first = f.base + pos
    return count, first, max(0, reader.files_end() - offset)


# ---------------------------------------------------------------------------------------------
# inspect
# ---------------------------------------------------------------------------------------------
def inspect_store(reader: StoreReader) -> dict:
    files = reader.commitlog_files
    cp = reader.checkpoint()
    max_offset = reader.valid_end()
    min_offset = reader.min_offset()
    cl_files = []
    for f in files:
        written = min(f.size, max(0, max_offset - f.base))
        cl_files.append({"name": f.name, "size": f.size, "from_offset": f.base,
                         "to_offset": f.end, "written": written})
    queues = []
    for q in reader.queues():
        last = q.last_real()
        queues.append({
            "topic": q.topic, "queue_id": q.queue_id, "files": len(q.files),
            "file_size": q.file_size,
            "min_offset": q.min_offset(min_offset), "max_offset": q.max_offset(),
            "max_phy_offset": (last[1][0] + last[1][1]) if last else None,
        })
    index = []
    for ix in reader.index_files():
        h = ix.header
        index.append({
            "name": ix.name, "size": ix.size, "entries": ix.entries,
            "hash_slots": ix.slots, "max_entries": ix.max_entries,
            "begin_timestamp": h.begin_timestamp if h else None,
            "begin_time": iso_ms(h.begin_timestamp) if h else None,
            "end_timestamp": h.end_timestamp if h else None,
            "end_time": iso_ms(h.end_timestamp) if h else None,
            "begin_phy_offset": h.begin_phy_offset if h else None,
            "end_phy_offset": h.end_phy_offset if h else None,
        })
    checkpoint = {
        "exists": cp.existed, "damaged": cp.damaged, "damage_reason": cp.damage_reason,
        "physicMsgTimestamp": cp.physic_msg_timestamp,
        "physicMsgTime": iso_ms(cp.physic_msg_timestamp),
        "logicsMsgTimestamp": cp.logics_msg_timestamp,
        "logicsMsgTime": iso_ms(cp.logics_msg_timestamp),
        "indexMsgTimestamp": cp.index_msg_timestamp,
        "indexMsgTime": iso_ms(cp.index_msg_timestamp),
        "masterFlushedOffset": cp.master_flushed_offset,
        "confirmPhyOffset": cp.confirm_phy_offset,
    }
    abort = reader.abort_exists
    return {
        "store": reader.root,
        "abort": abort,
        "clean_shutdown": not abort,
        "lock_file": os.path.exists(os.path.join(reader.root, "lock")),
        "lock_pid": reader.lock_pid(),
        "commitlog": {
            "dir": reader.commitlog_dir, "file_size": reader.file_size, "files": cl_files,
            "min_offset": min_offset, "max_offset": max_offset,
        },
        "checkpoint": checkpoint,
        "consume_queues": queues,
        "index": {"dir": reader.index_dir, "files": index},
    }


def _print_inspect(info: dict) -> None:
    _emit(f"store: {info['store']}")
    if info["abort"]:
        _emit("last shutdown: NOT clean (abort file present: the store is running or crashed)")
    else:
        _emit("last shutdown: clean (no abort file)")
    if info["lock_pid"] is not None:
        _emit(f"lock file: last holder pid {info['lock_pid']} (not probed)")
    cl = info["commitlog"]
    _emit("")
    _emit(f"commitlog: {cl['dir']}")
    _emit(f"  {len(cl['files'])} file(s) of {cl['file_size']} bytes; "
          f"min offset {cl['min_offset']}, max offset {cl['max_offset']}")
    if cl["files"]:
        rows = [[f["name"], f["size"], f["from_offset"], f["written"]] for f in cl["files"]]
        for line in _table(["FILE", "SIZE", "FROM_OFFSET", "WRITTEN"], rows, {1, 2, 3}):
            _emit("  " + line)
    cp = info["checkpoint"]
    _emit("")
    state = "missing" if not cp["exists"] and not cp["damaged"] else (
        f"DAMAGED ({cp['damage_reason']})" if cp["damaged"] else "ok")
    _emit(f"checkpoint: {state}")
    for name in ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp"):
        iso = cp[name.replace("Timestamp", "Time")]
        _emit(f"  {name:<20} {cp[name]}" + (f"  ({iso})" if iso else ""))
    _emit(f"  {'masterFlushedOffset':<20} {cp['masterFlushedOffset']}")
    _emit(f"  {'confirmPhyOffset':<20} {cp['confirmPhyOffset']}")
    _emit("")
    queues = info["consume_queues"]
    _emit(f"consume queues: {len(queues)}")
    if queues:
        rows = [[q["topic"], q["queue_id"], q["files"], q["min_offset"], q["max_offset"],
                 q["max_phy_offset"]] for q in queues]
        for line in _table(["TOPIC", "QUEUE", "FILES", "MIN_OFFSET", "MAX_OFFSET", "MAX_PHY_OFFSET"],
                           rows, {1, 2, 3, 4, 5}):
            _emit("  " + line)
    _emit("")
    ix = info["index"]["files"]
    _emit(f"index files: {len(ix)}")
    if ix:
        rows = [[i["name"], i["entries"], i["hash_slots"], i["max_entries"], i["begin_time"],
                 i["end_time"], i["begin_phy_offset"], i["end_phy_offset"]] for i in ix]
        for line in _table(["NAME", "ENTRIES", "SLOTS", "MAX_ENTRIES", "BEGIN_TIME", "END_TIME",
                            "BEGIN_PHY", "END_PHY"], rows, {1, 2, 3, 6, 7}):
            _emit("  " + line)


def cmd_inspect(args) -> int:
    with StoreReader(args.dir) as reader:
        info = inspect_store(reader)
    if args.json:
        _emit(json.dumps(info, indent=2))
    else:
        _print_inspect(info)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# dump
# ---------------------------------------------------------------------------------------------
def record_dict(offset: int, rec: MessageRecord, *, with_body: bool = True,
                full_body_text: bool = False) -> dict:
    d: dict[str, Any] = {
        "offset": offset, "size": rec.total_size, "topic": rec.topic, "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset, "sys_flag": rec.sys_flag, "flag": rec.flag,
        "store_timestamp": rec.store_timestamp, "store_time": iso_ms(rec.store_timestamp),
        "born_timestamp": rec.born_timestamp, "born_time": iso_ms(rec.born_timestamp),
        "born_host": rec.born_host, "store_host": rec.store_host,
        "reconsume_times": rec.reconsume_times, "tags": rec.tags, "keys": rec.keys,
        "uniq_key": rec.uniq_key, "msg_id": rec.msg_id, "properties": rec.properties,
        "body_length": len(rec.body), "body_crc_ok": codec.body_crc(rec.body) == rec.body_crc,
    }
    if with_body:
        d["body_base64"] = base64.b64encode(rec.body).decode("ascii")
        d["body_preview"] = body_preview(rec.body, 200)
        if full_body_text:
            d["body_text"] = rec.body.decode("utf-8", "replace")
    return d


_DUMP_HEADER = (f"{'OFFSET':>12} {'SIZE':>6} {'TOPIC':<16} {'Q':>3} {'QOFFSET':>8} "
                f"{'STORE_TIME':<29} {'TAGS':<8} {'KEYS':<16} {'BODY':>6} MSG_ID")


def _dump_row(offset: int, rec: MessageRecord) -> str:
    crc = "" if codec.body_crc(rec.body) == rec.body_crc else "  CRC-MISMATCH"
    return (f"{offset:>12} {rec.total_size:>6} {rec.topic:<16} {rec.queue_id:>3} "
            f"{rec.queue_offset:>8} {iso_ms(rec.store_timestamp) or '-':<29} "
            f"{rec.tags or '-':<8} {' '.join(rec.keys) or '-':<16} {len(rec.body):>6} "
            f"{rec.msg_id}{crc}")


def _body_lines(body: bytes) -> list[str]:
    text = body.decode("utf-8", "replace")
    return ["    | " + line for line in text.splitlines() or [""]]


def cmd_dump(args) -> int:
    shown = 0
    scanned = 0
    with StoreReader(args.dir) as reader:
        start = args.from_offset if args.from_offset is not None else reader.min_offset()
        if reader.commitlog_files and start >= reader.files_end():
            raise UsageError(f"--from {start} is past the end of the commitlog files "
                             f"({reader.files_end()})")
        res = ScanResult()
        progress = Progress(_progress_enabled(args))
        if not args.json:
            _emit(_DUMP_HEADER)
        # No CRC in the walk: a record with a bad body CRC is shown (flagged) rather than
        # ending the dump; a record whose structure is broken ends it.
        for offset, f, pos, n in reader.scan(start, check_crc=False, result=res):
            scanned += 1
            progress.update(lambda: f"dump: offset {offset}, {scanned} records scanned")
            if args.topic is not None or args.queue is not None:
                head = codec.decode_dispatch_fields(f.view, pos, n)
                if args.topic is not None and head[5] != args.topic:
                    continue
                if args.queue is not None and head[0] != args.queue:
                    continue
            rec = codec.decode(f.view, pos, pos + n, check_crc=False)
            assert isinstance(rec, MessageRecord)
            if args.json:
                _json_line(record_dict(offset, rec, full_body_text=args.body))
            else:
                _emit(_dump_row(offset, rec))
                if args.body:
                    for line in _body_lines(rec.body):
                        _emit(line)
            shown += 1
            if args.limit is not None and shown >= args.limit:
                break
        progress.done()
    stopped = ""
    if res.stop_kind is not None and res.stop_kind is not RecordKind.EMPTY and (
            args.limit is None or shown < args.limit):
        stopped = f"; stopped at offset {res.valid_end}: {res.stop_reason}"
    _err(f"dump: {shown} record(s) shown, {scanned} scanned{stopped}")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------------------------
class Findings:
    """Damage (exit 1) and warnings, counted by kind, with the first examples of each."""

    def __init__(self, max_examples: int = 20) -> None:
        self.max_examples = max_examples
        self.damage_counts: Counter[str] = Counter()
        self.warning_counts: Counter[str] = Counter()
        self.examples: dict[str, list[dict]] = defaultdict(list)

    def damage(self, kind: str, message: str, count: int = 1, **fields: Any) -> None:
        self.damage_counts[kind] += count
        if count != 1:
            fields["count"] = count
        if len(self.examples[kind]) < self.max_examples:
            self.examples[kind].append({"kind": kind, "severity": "damage", "message": message,
                                        **fields})

    def warn(self, kind: str, message: str, **fields: Any) -> None:
        self.warning_counts[kind] += 1
        if len(self.examples[kind]) < self.max_examples:
            self.examples[kind].append({"kind": kind, "severity": "warning", "message": message,
                                        **fields})

    @property
    def damaged(self) -> bool:
        return bool(self.damage_counts)

    def issues(self) -> list[dict]:
        return [e for kind in self.examples for e in self.examples[kind]]


@dataclass
class _QueueState:
    q: QueueFiles
    first_index: int
    end_index: int
    verified: bytearray


def verify_store(reader: StoreReader, *, index_sample: int = 1000,
                 progress: Progress | None = None) -> dict:
    progress = progress or Progress(False)
    findings = Findings()
    delay_levels = StoreConfig(store_path_root_dir=reader.root).delay_levels_ms()

    def delay_level_ms(level: int) -> int:
        return delay_levels[min(level, len(delay_levels)) - 1] if level > 0 else 0

    files = reader.commitlog_files
    cl_min = reader.min_offset()
    for f in files[:-1]:
        if f.size != reader.file_size:
            findings.damage("commitlog.file_size", f"commitlog file {f.name} has {f.size} bytes, "
                            f"the first file {reader.file_size}", file=f.name)
    if files and files[-1].size != reader.file_size:
        findings.warn("commitlog.file_size", f"last commitlog file {files[-1].name} has "
                      f"{files[-1].size} bytes, the first {reader.file_size} (interrupted creation?)",
                      file=files[-1].name)

    # ---- consume queue layout, dispatched end -----------------------------------------------
    queues: dict[tuple[str, int], _QueueState] = {}
    dispatched_end = 0
    for q in reader.queues():
        if not q.files:
            continue
        sizes = {f.size for f in q.files}
        if len(sizes) > 1:
            findings.damage("cq.file_size", f"{q.name}: files of different sizes {sorted(sizes)}",
                            topic=q.topic, queue_id=q.queue_id)
        for f in q.files:
            if f.size % CQ_UNIT_SIZE or f.base % CQ_UNIT_SIZE:
                findings.damage("cq.file_size", f"{q.name}: file {f.name} ({f.size} bytes) is not "
                                f"aligned to 20-byte units", topic=q.topic, queue_id=q.queue_id)
        first_index = q.files[0].base // CQ_UNIT_SIZE
        end_index = q.max_offset()
        queues[(q.topic, q.queue_id)] = _QueueState(q, first_index, end_index,
                                                    bytearray(max(0, end_index - first_index)))
        last = q.last_real()
        if last is not None:
            dispatched_end = max(dispatched_end, last[1][0] + last[1][1])

    # ---- pass 1: every record (CRC) and its consume queue unit ------------------------------
    scan = ScanResult()
    total_bytes = max(1, reader.files_end() - cl_min)
    sample: list[tuple[int, str, list[str]]] = []
    seen_for_sample = 0
    rng = random.Random(0)
    pending = 0
    checked_units = 0
    prepared = 0
    last_offset = cl_min

    def record_progress(end: int) -> None:
        nonlocal last_offset
        last_offset = end

    for offset, f, pos, n in reader.scan(None, check_crc=True, result=scan, progress=record_progress):
        progress.update(lambda: f"verify: commitlog {human_bytes(offset - cl_min)} / "
                                f"{human_bytes(total_bytes)} ({100 * (offset - cl_min) // total_bytes}%), "
                                f"{scan.records} records")
        req = build_request(f.view, pos, n, offset, delay_level_ms)
        if not req.dispatchable:
            prepared += 1
            continue
        keys = ([req.uniq_key] if req.uniq_key else []) + [k for k in req.keys.split(" ") if k]
        if keys:
            seen_for_sample += 1
            if index_sample <= 0 or len(sample) < index_sample:
                sample.append((offset, req.topic, keys))
            else:
                j = rng.randrange(seen_for_sample)
                if j < index_sample:
                    sample[j] = (offset, req.topic, keys)
        qs = queues.get((req.topic, req.queue_id))
        unit = qs.q.unit(req.consume_queue_offset) if qs is not None else None
        where = f"{req.topic}-{req.queue_id}@{req.consume_queue_offset}"
        if unit is None or unit == _ZERO_UNIT:
            if offset >= dispatched_end:
                pending += 1
            else:
                findings.damage("cq.missing_unit", f"record at {offset} ({where}) has no consume "
                                f"queue unit", offset=offset, topic=req.topic,
                                queue_id=req.queue_id, queue_offset=req.consume_queue_offset)
            continue
        tags_ok = req.topic == SCHEDULE_TOPIC or unit[2] == req.tags_code
        if unit[0] == offset and unit[1] == n and tags_ok:
            checked_units += 1
            i = req.consume_queue_offset - qs.first_index
            if 0 <= i < len(qs.verified):
                qs.verified[i] = 1
        else:
            findings.damage("cq.unit_mismatch", f"record at {offset} size {n} tagsCode "
                            f"{req.tags_code} ({where}): its unit holds phy {unit[0]} size "
                            f"{unit[1]} tagsCode {unit[2]}", offset=offset, topic=req.topic,
                            queue_id=req.queue_id, queue_offset=req.consume_queue_offset)
    # A running store may have appended since: follow the records that appeared meanwhile.
    late = 0
    if scan.stop_kind is RecordKind.EMPTY and reader.live:
        more = ScanResult()
        for _ in reader.scan(scan.valid_end, check_crc=True, result=more):
            late += 1
        if late:
            scan.valid_end = more.valid_end
            scan.stop_kind, scan.stop_reason = more.stop_kind, more.stop_reason
    valid_end = scan.valid_end

    for off, stored in scan.offset_mismatches:
        findings.damage("commitlog.offset_field", f"record at {off} stores physicalOffset {stored}",
                        offset=off)
    extra = scan.offset_mismatch_count - len(scan.offset_mismatches)
    for _ in range(max(0, extra)):
        findings.damage("commitlog.offset_field", "record stores a wrong physicalOffset")
    for off, size, want in scan.blank_mismatches:
        findings.damage("commitlog.blank", f"end-of-file blank at {off} says {size} bytes, "
                        f"{want} remain in the file", offset=off)
    tail_nonzero, tail_first, tail_bytes = _tail_after(reader, valid_end)
    tail = {"valid_end": valid_end, "stop": scan.stop_kind.name if scan.stop_kind else "END_OF_FILES",
            "stop_reason": scan.stop_reason, "bytes_after": tail_bytes,
            "nonzero_bytes_after": tail_nonzero, "first_nonzero_after": tail_first}
    if scan.gap is not None:
        findings.damage("commitlog.gap", f"commitlog files are not contiguous: expected a file at "
                        f"{scan.gap[0]}, found {scan.gap[1]}", offset=scan.gap[0])
    if tail_nonzero:
        bad = valid_end if scan.stop_kind not in (None, RecordKind.EMPTY) else tail_first
        later = sum(1 for f in files if f.base > valid_end and f.size >= 8
                    and codec.check_record(f.view, 0, f.size, True)[0] is RecordKind.RECORD)
        findings.damage(
            "commitlog.damage",
            f"first bad offset {bad}: {scan.stop_reason}; {reader.files_end() - bad} bytes follow "
            f"it ({tail_nonzero} non-zero)" + (f"; {later} later file(s) start with a valid record"
                                               if later else ""),
            offset=bad, bytes_after=reader.files_end() - bad, nonzero_bytes_after=tail_nonzero,
            reason=scan.stop_reason)
        tail["bad_offset"] = bad
    progress.done()

    # ---- pass 2: every consume queue unit --------------------------------------------------
    total_units = sum(s.end_index - s.first_index for s in queues.values()) or 1
    units_seen = 0
    fillers_mid = 0
    expired = 0
    beyond: Counter[str] = Counter()  # units past a damaged valid end, per queue
    for (topic, qid), qs in queues.items():
        q = qs.q
        prev_phy = -1
        real_seen = False
        zero_from: int | None = None
        expected_base = q.files[0].base
        for f in q.files:
            if f.base != expected_base:
                findings.damage("cq.hole", f"{q.name}: file {f.name} does not follow the previous "
                                f"file (expected offset {expected_base})", topic=topic, queue_id=qid)
            expected_base = f.end
            end = q.written_end(f)
            for index, unit in q.iter_units(f):
                units_seen += 1
                progress.update(lambda: f"verify: consume queues {units_seen}/{total_units} units")
                phy, size, tcode = unit
                if unit == _ZERO_UNIT:
                    if zero_from is None:
                        zero_from = index
                    continue
                if zero_from is not None:
                    findings.damage("cq.hole", f"{q.name}: unwritten units {zero_from}..{index - 1} "
                                    f"before unit {index}", topic=topic, queue_id=qid, index=index)
                    zero_from = None
                if phy == 0 and size == CQ_FILLER_SIZE:
                    if real_seen:
                        fillers_mid += 1
                    continue
                if phy < 0 or size <= 0:
                    findings.damage("cq.bad_unit", f"{q.name}@{index}: invalid unit (phy {phy}, "
                                    f"size {size})", topic=topic, queue_id=qid, index=index)
                    continue
                real_seen = True
                if phy <= prev_phy:
                    findings.damage("cq.order", f"{q.name}@{index}: phy {phy} not after the "
                                    f"previous unit's {prev_phy}", topic=topic, queue_id=qid,
                                    index=index)
                prev_phy = phy
                i = index - qs.first_index
                if 0 <= i < len(qs.verified) and qs.verified[i]:
                    continue
                if phy < cl_min:
                    expired += 1
                    continue
                if tail_nonzero and phy + size > valid_end:
                    beyond[q.name] += 1
                    continue
                problem = _check_unit(reader, topic, qid, index, unit, valid_end, delay_level_ms)
                if problem:
                    findings.damage("cq.bad_unit", f"{q.name}@{index} (phy {phy} size {size}): "
                                    f"{problem}", topic=topic, queue_id=qid, index=index,
                                    offset=phy)
            if end < f.size and zero_from is None:
                zero_from = (f.base + end) // CQ_UNIT_SIZE
    if beyond:
        total_beyond = sum(beyond.values())
        findings.damage("cq.past_valid_end", f"{total_beyond} consume queue unit(s) in "
                        f"{len(beyond)} queue(s) point past the commitlog's valid end {valid_end} "
                        f"(recovery would cut them): " + ", ".join(
                            f"{name}: {n}" for name, n in sorted(beyond.items())),
                        count=total_beyond, offset=valid_end)
    if fillers_mid:
        findings.warn("cq.fillers", f"{fillers_mid} filler unit(s) inside queues (gaps in queue "
                      f"offsets filled by the store)")
    if pending:
        findings.warn("cq.pending", f"{pending} record(s) at the end of the commitlog are not "
                      f"dispatched to the consume queues yet (reput behind; the store catches up "
                      f"on start)")
    progress.done()

    # ---- index: keys of a sample of records --------------------------------------------------
    index_readers = reader.index_files()
    index_info: dict[str, Any] = {"files": len(index_readers), "sampled_records": 0,
                                  "keys_checked": 0, "keys_missing": 0, "not_indexed_yet": 0}
    usable = [ix for ix in index_readers if ix.entries > 0]
    unknown = [ix for ix in index_readers if ix.slots is None and ix.size > INDEX_HEADER_SIZE]
    for ix in unknown:
        findings.warn("index.geometry", f"index file {ix.name}: cannot tell its hash slot count "
                      f"from its size ({ix.size} bytes); not checked", file=ix.name)
    for ix in index_readers:
        if ix.size < INDEX_HEADER_SIZE:
            findings.damage("index.file", f"index file {ix.name} is only {ix.size} bytes",
                            file=ix.name)
    if not index_readers:
        index_info["note"] = "no index files (messageIndexEnable=false or nothing indexed)"
    elif usable:
        covered_from = min(ix.header.begin_phy_offset for ix in usable)
        covered_to = max(ix.header.end_phy_offset for ix in usable)
        sample.sort()
        for n_done, (phy, topic, keys) in enumerate(sample, 1):
            progress.update(lambda: f"verify: index {n_done}/{len(sample)} records")
            if phy < covered_from or phy >= valid_end:
                continue
            if phy > covered_to:
                index_info["not_indexed_yet"] += 1
                continue
            index_info["sampled_records"] += 1
            candidates = [ix for ix in reversed(usable)
                          if ix.slots is not None and ix.header.begin_phy_offset <= phy]
            for key in keys:
                index_info["keys_checked"] += 1
                full = build_key(topic, key)
                if not any(phy in set(ix.lookup(full)) for ix in candidates):
                    index_info["keys_missing"] += 1
                    findings.damage("index.missing_key", f"key {full!r} of the record at {phy} is "
                                    f"not in the index", offset=phy, key=full)
        if index_info["not_indexed_yet"]:
            findings.warn("index.pending", f"{index_info['not_indexed_yet']} sampled record(s) are "
                          f"past the index's end (not indexed yet)")
    progress.done()

    commitlog = {"files": len(files), "file_size": reader.file_size, "min_offset": cl_min,
                 "records": scan.records + late, "bytes": scan.bytes, "prepared_or_rollback": prepared,
                 "valid_end": valid_end, "files_end": reader.files_end(), "tail": tail}
    cq = {"queues": len(queues), "units": units_seen, "units_matching_records": checked_units,
          "pending_records": pending, "expired_units": expired, "dispatched_end": dispatched_end}
    n_damage = sum(findings.damage_counts.values())
    if findings.damaged:
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(findings.damage_counts.items()))
        summary = f"verify: DAMAGED - {n_damage} problem(s) ({kinds}); commitlog valid end {valid_end}"
    else:
        summary = (f"verify: OK - {commitlog['records']} records, {len(queues)} queues "
                   f"({units_seen} units), {index_info['keys_checked']} index keys checked; "
                   f"commitlog valid end {valid_end}")
    return {"store": reader.root, "ok": not findings.damaged, "live": reader.live,
            "commitlog": commitlog, "consume_queues": cq, "index": index_info,
            "damage_counts": dict(findings.damage_counts),
            "warning_counts": dict(findings.warning_counts),
            "issues": findings.issues(), "summary": summary}


def _check_unit(reader: StoreReader, topic: str, qid: int, index: int,
                unit: tuple[int, int, int], valid_end: int,
                delay_level_ms: Callable[[int], int]) -> str | None:
    """Why a unit not matched in pass 1 is wrong, or None when it is fine."""
    phy, size, tcode = unit
    f = reader.file_for(phy)
    if f is None:
        return "points outside the commitlog files"
    pos = phy - f.base
    # Below the valid end CRCs were checked in pass 1; past it (a running store appended since)
    # check them here.
    kind, total = codec.check_record(f.view, pos, f.size, phy + size > valid_end)
    if kind is not RecordKind.RECORD:
        return f"no valid record there ({kind.name})"
    if _I64.unpack_from(f.view, pos + codec.PHYSICAL_OFFSET_POS)[0] != phy:
        return "not the start of a record"
    if total != size:
        return f"the record there has {total} bytes"
    req = build_request(f.view, pos, total, phy, delay_level_ms)
    if (req.topic, req.queue_id) != (topic, qid):
        return f"the record there belongs to {req.topic}-{req.queue_id}"
    if not req.dispatchable:
        return "the record there is a prepared/rollback transaction record"
    if req.consume_queue_offset != index:
        return f"the record there has queue offset {req.consume_queue_offset}"
    if topic != SCHEDULE_TOPIC and req.tags_code != tcode:
        return f"tagsCode {tcode} but the record's tag hashes to {req.tags_code}"
    return None


def _print_verify(report: dict) -> None:
    cl = report["commitlog"]
    tail = cl["tail"]
    _emit(f"store: {report['store']}" + ("  (abort file present: running or crashed)"
                                          if report["live"] else ""))
    _emit(f"commitlog: {cl['files']} file(s), {cl['records']} records CRC-checked, offsets "
          f"{cl['min_offset']}..{cl['valid_end']} (valid end {cl['valid_end']}, files end "
          f"{cl['files_end']})")
    if tail["nonzero_bytes_after"]:
        _emit(f"  tail: DAMAGED at offset {tail.get('bad_offset')}: {tail['stop_reason']}; "
              f"{tail['bytes_after']} bytes after the valid end, {tail['nonzero_bytes_after']} non-zero")
    else:
        _emit("  tail: clean (only zero bytes after the valid end)")
    cq = report["consume_queues"]
    _emit(f"consume queues: {cq['queues']} queue(s), {cq['units']} unit(s), "
          f"{cq['units_matching_records']} matched to records, {cq['pending_records']} "
          f"record(s) not dispatched yet")
    ix = report["index"]
    if ix.get("note"):
        _emit(f"index: {ix['note']}")
    else:
        _emit(f"index: {ix['files']} file(s); {ix['sampled_records']} sampled record(s), "
              f"{ix['keys_checked']} key(s) checked, {ix['keys_missing']} missing")
    issues = report["issues"]
    if issues:
        _emit("")
    for issue in issues:
        tag = "DAMAGE " if issue["severity"] == "damage" else "warning"
        _emit(f"{tag} [{issue['kind']}] {issue['message']}")
    shown: Counter[str] = Counter()
    for issue in issues:
        shown[issue["kind"]] += issue.get("count", 1)
    for kind, count in {**report["damage_counts"], **report["warning_counts"]}.items():
        if count > shown[kind]:
            _emit(f"        ... and {count - shown[kind]} more [{kind}]")
    _emit(report["summary"])


def cmd_verify(args) -> int:
    with StoreReader(args.dir) as reader:
        report = verify_store(reader, index_sample=args.index_sample,
                              progress=Progress(_progress_enabled(args)))
    if args.json:
        _emit(json.dumps(report, indent=2))
    else:
        _print_verify(report)
    return EXIT_OK if report["ok"] else EXIT_DAMAGE


# ---------------------------------------------------------------------------------------------
# opening the store: config, geometry
# ---------------------------------------------------------------------------------------------
def _detect_geometry(root: str, commit_log_dir: str) -> dict[str, Any]:
    """Sizes of the files already in a store directory (absent keys: no such files)."""
    out: dict[str, Any] = {}
    cl = _numbered_files(commit_log_dir, 20)
    if cl:
        out["mapped_file_size_commit_log"] = os.path.getsize(cl[0][0])
    cq_sizes: Counter[int] = Counter()
    cq_root = os.path.join(root, "consumequeue")
    if os.path.isdir(cq_root):
        for topic in os.listdir(cq_root):
            tdir = os.path.join(cq_root, topic)
            if not os.path.isdir(tdir):
                continue
            for qname in os.listdir(tdir):
                files = _numbered_files(os.path.join(tdir, qname), 20)
                if files:
                    size = os.path.getsize(files[0][0])
                    if size:
                        cq_sizes[size] += 1
    if len(cq_sizes) > 1:
        raise UsageError(f"consume queue files of different sizes in {cq_root}: "
                         f"{sorted(cq_sizes)}; run verify")
    if cq_sizes:
        out["mapped_file_size_consume_queue"] = next(iter(cq_sizes))
    index = _numbered_files(os.path.join(root, "index"), 17)
    if index:
        out["index_files"] = [p for p, _ in index]
    return out


def build_store_config(root: str, config_path: str | None, file_size: int | None = None) -> StoreConfig:
    """StoreConfig for DIR: --config settings, the sizes of the files already there (which
    must win: the store refuses or even deletes files of another size), the tool's small
    defaults for a new store. Warnings go to stderr."""
    explicit: set[str] = set()
    if config_path:
        try:
            config, unknown = load_config_file(config_path)
            with open(config_path, encoding="utf-8") as fh:
                props = parse_properties(fh.read())
        except ConfigError as e:
            raise UsageError(str(e))
        except OSError as e:
            raise UsageError(f"cannot read {config_path}: {e}")
        for key in unknown:
            _err(f"warning: {config_path}: unknown key {key!r} ignored")
        explicit = {FIELD_BY_KEY[k] for k in props if k in FIELD_BY_KEY}
        if "store_path_root_dir" in explicit and os.path.abspath(config.store_path_root_dir) != \
                os.path.abspath(root):
            _err(f"warning: {config_path}: storePathRootDir={config.store_path_root_dir} "
                 f"ignored; using {root}")
    else:
        config = StoreConfig(store_path_root_dir=root)
    try:
        config = config.with_changes(store_path_root_dir=root)
        geo = _detect_geometry(root, config.commit_log_dir)
        changes: dict[str, Any] = {}
        for name, default in (("mapped_file_size_commit_log", TOOL_COMMIT_LOG_FILE_SIZE),
                              ("mapped_file_size_consume_queue", TOOL_CQ_FILE_SIZE)):
            if name in geo:
                if name in explicit and getattr(config, name) != geo[name]:
                    _err(f"warning: {key_for(name)}={getattr(config, name)} ignored: the store's "
                         f"files have {geo[name]} bytes")
                if name == "mapped_file_size_commit_log" and file_size and file_size != geo[name]:
                    _err(f"warning: --file-size {file_size} ignored: the store's commitlog files "
                         f"have {geo[name]} bytes")
                changes[name] = geo[name]
            elif name == "mapped_file_size_commit_log" and file_size:
                changes[name] = file_size
            elif name not in explicit:
                changes[name] = default
        if "index_files" in geo:
            changes.update(_index_geometry_for(geo["index_files"], config, explicit))
        else:
            if "max_hash_slot_num" not in explicit:
                changes["max_hash_slot_num"] = TOOL_INDEX_SLOTS
            if "max_index_num" not in explicit:
                changes["max_index_num"] = TOOL_INDEX_NUM
        return config.with_changes(**changes)
    except ConfigError as e:
        raise UsageError(str(e))


def _index_geometry_for(paths: list[str], config: StoreConfig, explicit: set[str]) -> dict:
    hint = (config.max_hash_slot_num, config.max_index_num)
    found: set[tuple[int, int]] = set()
    for path in paths:
        ix = IndexReader(path)
        try:
            if ix.header is None:
                continue
            geo = infer_index_geometry(ix.size, ix.header, ix.file.view, hint)
        finally:
            ix.close()
        if geo is None:
            raise UsageError(f"cannot tell maxHashSlotNum/maxIndexNum of {path}; name them in "
                             f"--config")
        found.add(geo)
    if len(found) > 1:
        raise UsageError(f"index files of different geometries {sorted(found)}")
    if not found:
        return {}
    slots, num = found.pop()
    if {"max_hash_slot_num", "max_index_num"} & explicit and (slots, num) != hint:
        _err(f"warning: maxHashSlotNum/maxIndexNum {hint} ignored: the store's index files "
             f"have {(slots, num)}")
    return {"max_hash_slot_num": slots, "max_index_num": num}


def _open_store(config: StoreConfig, progress: Progress):
    from .message_store import MessageStore  # the read-only commands never need it

    store = MessageStore(config)
    store.load(progress=(lambda off: progress.update(lambda: f"recovering: offset {off}"))
               if progress.enabled else None)
    progress.done()
    return store


def _wait_dispatched(store, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while store.reput.behind() > 0:
        if time.monotonic() > deadline:
            return False
        store.reput.wakeup()
        time.sleep(0.005)
    return True


class UniqIdGen:
    """Producer-style unique message ids (RocketMQ MessageClientIDSetter shape: 32 hex)."""

    def __init__(self) -> None:
        self._prefix = (codec.pack_host_address("127.0.0.1").hex().upper()
                        + f"{os.getpid() & 0xFFFF:04X}{random.getrandbits(32):08X}")
        self._start = int(time.time() * 1000)
        self._counter = 0

    def next(self) -> str:
        self._counter = (self._counter + 1) & 0xFFFF
        diff = (int(time.time() * 1000) - self._start) & 0xFFFFFFFF
        return f"{self._prefix}{diff:08X}{self._counter:04X}"


# ---------------------------------------------------------------------------------------------
# put / get
# ---------------------------------------------------------------------------------------------
def cmd_put(args) -> int:
    if args.body is not None and args.body_file is not None:
        raise UsageError("give --body or --body-file, not both")
    if args.body_file is not None:
        try:
            with open(args.body_file, "rb") as fh:
                body = fh.read()
        except OSError as e:
            raise UsageError(f"cannot read {args.body_file}: {e}")
    else:
        body = (args.body if args.body is not None else "Hello from rmq-store").encode("utf-8")
    os.makedirs(args.dir, exist_ok=True)
    config = build_store_config(args.dir, args.config, args.file_size)
    progress = Progress(_progress_enabled(args))
    ids = UniqIdGen()
    try:
        store = _open_store(config, progress)
    except StoreError as e:
        _err(f"put: cannot open the store: {e}")
        return EXIT_DAMAGE
    failed = None
    written = 0
    try:
        store.start()
        remaining = args.count
        while remaining > 0 and failed is None:
            batch = []
            for _ in range(min(remaining, 256)):
                props = {codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: ids.next()}
                if args.tag:
                    props[codec.PROPERTY_TAGS] = args.tag
                if args.keys:
                    props[codec.PROPERTY_KEYS] = args.keys
                batch.append(Message(args.topic, body, args.queue, props))
            result = store.put_messages(batch)
            if not result.ok:
                failed = result
                break
            for msg, a in zip(batch, result.appends):
                written += 1
                uniq = msg.properties[codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
                if args.json:
                    _json_line({"status": result.status.value, "topic": args.topic,
                                "queue_id": args.queue, "offset": a.wrote_offset,
                                "size": a.wrote_bytes, "queue_offset": a.queue_offset,
                                "store_timestamp": a.store_timestamp, "msg_id": a.msg_id,
                                "uniq_key": uniq})
                else:
                    _emit(f"{result.status.value} offset={a.wrote_offset} size={a.wrote_bytes} "
                          f"queue={args.topic}-{args.queue} queueOffset={a.queue_offset} "
                          f"msgId={a.msg_id} uniqKey={uniq}")
            remaining -= len(batch)
            progress.update(lambda: f"put: {written}/{args.count} messages")
        _wait_dispatched(store)
    finally:
        progress.done()
        store.shutdown()
    if failed is not None:
        _err(f"put: {failed.status.value}" + (f": {failed.reason}" if failed.reason else "")
             + f" ({written} of {args.count} written)")
        return EXIT_DAMAGE
    _err(f"put: {written} message(s) stored in {args.topic}-{args.queue}")
    return EXIT_OK


def cmd_get(args) -> int:
    if not os.path.isdir(args.dir):
        raise UsageError(f"{args.dir}: no such directory")
    if not os.path.isdir(os.path.join(args.dir, "commitlog")):
        raise UsageError(f"{args.dir}: not a store directory (no commitlog/)")
    try:
        TagFilter.parse(args.tag_filter)
    except ValueError as e:
        raise UsageError(str(e))
    config = build_store_config(args.dir, args.config)
    progress = Progress(_progress_enabled(args))
    try:
        store = _open_store(config, progress)
    except StoreError as e:
        _err(f"get: cannot open the store: {e}")
        return EXIT_DAMAGE
    shown = 0
    try:
        cq = store.cq_store.find(args.topic, args.queue)
        offset = args.offset if args.offset is not None else (cq.min_offset() if cq else 0)
        status = None
        result = None
        if not args.json:
            _emit(f"{'QOFFSET':>8} {'OFFSET':>12} {'SIZE':>6} {'TAGS':<8} {'KEYS':<16} "
                  f"{'STORE_TIME':<29} BODY")
        while shown < args.count:
            result = store.get_messages(args.topic, args.queue, offset, args.count - shown,
                                        args.tag_filter)
            status = result.status
            for rec in result.messages:
                if args.json:
                    _json_line(record_dict(rec.physical_offset, rec, full_body_text=args.body))
                else:
                    _emit(f"{rec.queue_offset:>8} {rec.physical_offset:>12} {rec.total_size:>6} "
                          f"{rec.tags or '-':<8} {' '.join(rec.keys) or '-':<16} "
                          f"{iso_ms(rec.store_timestamp) or '-':<29} {body_preview(rec.body, 40)}")
                    if args.body:
                        for line in _body_lines(rec.body):
                            _emit(line)
                shown += 1
            if result.next_begin_offset <= offset or status.name not in ("FOUND", "NO_MATCHED_MESSAGE"):
                break
            offset = result.next_begin_offset
        if result is not None:
            _err(f"get: {shown} message(s) from {args.topic}-{args.queue}; last status "
                 f"{status.value}, next offset {result.next_begin_offset}, queue offsets "
                 f"{result.min_offset}..{result.max_offset}")
    finally:
        store.shutdown()
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# demo
# ---------------------------------------------------------------------------------------------
def _demo_body(i: int, topic: str, rng: random.Random, max_pad: int) -> bytes:
    roll = rng.random()
    if roll < 0.6:
        pad = rng.randint(0, 120)
    elif roll < 0.95:
        pad = rng.randint(200, 1500)
    elif roll < 0.995:
        pad = rng.randint(2000, 8000)
    else:
        pad = rng.randint(16_000, 64_000)
    pad = min(pad, max_pad)
    doc = {"id": i, "topic": topic, "amount": round(rng.uniform(1, 1000), 2),
           "note": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(min(pad, 64)))}
    text = json.dumps(doc)
    if pad > 64:
        text = text[:-1] + ', "pad": "' + "x" * (pad - 64) + '"}'
    return text.encode("utf-8")


def cmd_demo(args) -> int:
    root = args.dir
    if os.path.exists(root) and not os.path.isdir(root):
        raise UsageError(f"{root} exists and is not a directory")
    existing = _numbered_files(os.path.join(root, "commitlog"), 20)
    if existing:
        raise UsageError(f"{root} already holds a commitlog ({len(existing)} file(s)); "
                         f"demo writes into a fresh directory only")
    os.makedirs(root, exist_ok=True)
    config = build_store_config(root, args.config, args.file_size)
    progress = Progress(_progress_enabled(args))
    rng = random.Random(args.seed)
    max_pad = max(0, min(config.max_message_size, config.mapped_file_size_commit_log // 4) - 256)
    ids = UniqIdGen()
    t0 = time.monotonic()
    try:
        store = _open_store(config, progress)
    except StoreError as e:
        _err(f"demo: cannot open the store: {e}")
        return EXIT_DAMAGE
    written = 0
    nbytes = 0
    failed = None
    try:
        store.start()
        for first in range(0, args.messages, args.batch):
            batch = []
            for i in range(first, min(args.messages, first + args.batch)):
                topic = DEMO_TOPICS[i % len(DEMO_TOPICS)]
                queue = (i // len(DEMO_TOPICS)) % DEMO_QUEUES
                tag = DEMO_TAGS[(i // (len(DEMO_TOPICS) * DEMO_QUEUES)) % len(DEMO_TAGS)]
                props = {codec.PROPERTY_TAGS: tag, codec.PROPERTY_KEYS: f"order-{i}",
                         codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: ids.next()}
                batch.append(Message(topic, _demo_body(i, topic, rng, max_pad), queue, props))
            result = store.put_messages(batch)
            if not result.ok:
                failed = result
                break
            written += len(batch)
            nbytes += sum(a.wrote_bytes for a in result.appends)
            progress.update(lambda: f"demo: {written}/{args.messages} messages "
                                    f"({100 * written // args.messages}%), {human_bytes(nbytes)}")
        progress.done()
        _wait_dispatched(store)
        end = store.max_phy_offset()
        n_files = len(store.commitlog.queue.snapshot())
    finally:
        progress.done()
        store.shutdown()
    if failed is not None:
        _err(f"demo: put failed after {written} messages: {failed.status.value} {failed.reason}")
        return EXIT_DAMAGE
    secs = max(time.monotonic() - t0, 1e-6)
    q = shlex.quote(os.path.abspath(root))
    _emit(f"demo: wrote {written} messages ({human_bytes(nbytes)}) to {os.path.abspath(root)} "
          f"in {secs:.1f} s ({written / secs:.0f} msg/s)")
    _emit(f"  commitlog: {n_files} file(s) of {human_bytes(config.mapped_file_size_commit_log)}, "
          f"offsets 0..{end}")
    _emit(f"  topics: {', '.join(DEMO_TOPICS)} ({DEMO_QUEUES} queues each); tags "
          f"{'/'.join(DEMO_TAGS)}; keys order-0..order-{max(written - 1, 0)}; UNIQ_KEY on each")
    _emit("try:")
    _emit(f"  python -m store inspect {q}")
    _emit(f"  python -m store dump {q} --topic {DEMO_TOPICS[0]} --queue 0 --limit 10")
    _emit(f"  python -m store verify {q}")
    _emit(f"  python -m store get {q} --topic {DEMO_TOPICS[0]} --queue 0 --count 5 "
          f"--tag-filter 'TagA||TagB'")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m store",
        description="Inspect, dump, verify and exercise a RocketMQ-layout message store.")
    p.add_argument("-v", "--verbose", action="store_true", help="log store activity (INFO)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("dir", metavar="DIR", help="store root directory (storePathRootDir)")
        sp.add_argument("--progress", action="store_true",
                        help="progress on stderr even when it is not a terminal")
        return sp

    sp = add("inspect", "files, offsets, consume queues, index and checkpoint (read-only)")
    sp.add_argument("--json", action="store_true", help="one JSON document")
    sp.set_defaults(func=cmd_inspect)

    sp = add("dump", "commitlog records as a table or JSON lines (read-only)")
    sp.add_argument("--topic", help="only this topic")
    sp.add_argument("--queue", type=_nonneg_int, help="only this queue id")
    sp.add_argument("--from", dest="from_offset", type=_nonneg_int, metavar="OFFSET",
                    help="physical offset to start at (default: the first record)")
    sp.add_argument("--limit", type=_pos_int, metavar="N", help="at most N records")
    sp.add_argument("--json", action="store_true", help="JSON lines (body as base64 + preview)")
    sp.add_argument("--body", action="store_true", help="print message bodies")
    sp.set_defaults(func=cmd_dump)

    sp = add("verify", "check CRCs, consume queues and index (read-only); exit 1 on damage")
    sp.add_argument("--json", action="store_true", help="one JSON document")
    sp.add_argument("--index-sample", type=_nonneg_int, default=1000, metavar="N",
                    help="records whose keys are looked up in the index (0: all; default 1000)")
    sp.set_defaults(func=cmd_verify)

    def store_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--config", metavar="FILE", help="broker.conf-style settings")

    sp = add("put", "open the store and put messages")
    store_opts(sp)
    sp.add_argument("--topic", required=True)
    sp.add_argument("--queue", type=_nonneg_int, default=0)
    sp.add_argument("--tag")
    sp.add_argument("--keys", help='space-separated keys, e.g. "a b"')
    body = sp.add_mutually_exclusive_group()
    body.add_argument("--body", help="body text (UTF-8)")
    body.add_argument("--body-file", metavar="FILE", help="body bytes from a file")
    sp.add_argument("--count", type=_pos_int, default=1)
    sp.add_argument("--file-size", type=parse_size, metavar="BYTES",
                    help=f"commitlog file size of a new store (default {TOOL_COMMIT_LOG_FILE_SIZE})")
    sp.add_argument("--json", action="store_true", help="JSON lines")
    sp.set_defaults(func=cmd_put)

    sp = add("get", "open the store and read messages of one queue")
    store_opts(sp)
    sp.add_argument("--topic", required=True)
    sp.add_argument("--queue", type=_nonneg_int, required=True)
    sp.add_argument("--offset", type=_nonneg_int, help="queue offset (default: the queue's min)")
    sp.add_argument("--count", type=_pos_int, default=32)
    sp.add_argument("--tag-filter", metavar="EXPR", help='e.g. "TagA||TagB" (default: all)')
    sp.add_argument("--json", action="store_true", help="JSON lines")
    sp.add_argument("--body", action="store_true", help="print whole bodies")
    sp.set_defaults(func=cmd_get)

    sp = add("demo", "write demo messages into a fresh store")
    store_opts(sp)
    sp.add_argument("--messages", type=_pos_int, required=True, metavar="N")
    sp.add_argument("--file-size", type=parse_size, metavar="BYTES",
                    help=f"commitlog file size (default {TOOL_COMMIT_LOG_FILE_SIZE})")
    sp.add_argument("--batch", type=_pos_int, default=128, help=argparse.SUPPRESS)
    sp.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    sp.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except UsageError as e:
        _err(f"{parser.prog} {args.command}: error: {e}")
        return EXIT_USAGE
    except BrokenPipeError:  # `... | head`: the reader went away
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return EXIT_DAMAGE
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

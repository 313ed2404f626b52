"""The read-only view of a whole store directory (see the package docstring)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from .. import codec
from ..checkpoint import StoreCheckpoint
from ..codec import RecordKind
from store.commitlog.commitlog_walk import CommitLogWalk, Stop, stop_reason
from ..layout import (COMMITLOG_DIR, CONSUME_QUEUE_DIR, StoreLayout, is_index_file_name,
                      is_offset_file_name)
from ..markers import holder_pid
from .files import ROFile, file_holding, numbered_files
from .index_reader import IndexReader
from .queue_files import QueueFiles


_KIND_OF_STOP = {Stop.EMPTY: RecordKind.EMPTY, Stop.NEED_MORE: RecordKind.NEED_MORE,
                 Stop.CORRUPT: RecordKind.CORRUPT}


class NotAStoreDirectory(Exception):
    """The directory is missing, or holds neither commitlog/ nor consumequeue/."""


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



class StoreReader:
    """Read-only view of a store directory: commitlog, consume queues, index, checkpoint and
    markers. Opens nothing for writing, takes no lock, recovers nothing."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        if not os.path.isdir(self.root):
            raise NotAStoreDirectory(f"{root}: no such directory")
        self.paths = StoreLayout(self.root)
        self.commitlog_dir = self.paths.commitlog_dir
        self.cq_dir = self.paths.consume_queue_dir
        self.index_dir = self.paths.index_dir
        if not (os.path.isdir(self.commitlog_dir) or os.path.isdir(self.cq_dir)):
            raise NotAStoreDirectory(f"{root}: not a store directory (no {COMMITLOG_DIR}/ or "
                                     f"{CONSUME_QUEUE_DIR}/)")
        self.commitlog_files = [ROFile(p, b) for p, b in
                                numbered_files(self.commitlog_dir, is_offset_file_name)]
        self.file_size = self.commitlog_files[0].size if self.commitlog_files else 0
        self._queues: list[QueueFiles] | None = None
        self._index: list[IndexReader] | None = None
        self.live = self.abort_exists

    def __enter__(self) -> "StoreReader":
        return self

    def __exit__(self, *exc: object) -> None:
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
        return os.path.exists(self.paths.abort)

    def lock_pid(self) -> int | None:
        """The pid written by the last holder of `lock` (the flock itself is not probed)."""
        try:
            with open(self.paths.lock, "rb") as fh:
                return holder_pid(fh.read(64))
        except OSError:
            return None

    def checkpoint(self) -> StoreCheckpoint:
        return StoreCheckpoint.load(self.paths.checkpoint)

    # -- commitlog -------------------------------------------------------------------------
    def min_offset(self) -> int:
        return self.commitlog_files[0].base if self.commitlog_files else 0

    def files_end(self) -> int:
        return self.commitlog_files[-1].end if self.commitlog_files else 0

    def file_for(self, offset: int) -> ROFile | None:
        return file_holding(self.commitlog_files, self.file_size, offset)

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
        walk = CommitLogWalk(check_crc=check_crc)
        tries: dict[int, int] = {}

        def again(offset: int, stop: Stop) -> bool:
            # A running store may be copying this record right now: look again (3 times).
            if not self.live or stop is Stop.EMPTY or tries.get(offset, 0) >= 3:
                return False
            tries[offset] = tries.get(offset, 0) + 1
            time.sleep(0.05)
            return True

        def file_done(end: int) -> None:
            if walk.blank_at is not None and walk.blank_size != end - walk.blank_at:
                res.blank_mismatches.append((walk.blank_at, walk.blank_size, end - walk.blank_at))
            if progress is not None:
                progress(end)

        f = files[first]
        for offset, n in walk.files(((f.base, f.view, f.size) for f in files[first:]),
                                    file_done, again):
            if walk.base != f.base:
                f = self.file_for(walk.base)
            pos = offset - f.base
            stored = codec.physical_offset_at(f.view, pos)
            if stored != offset:
                res.offset_mismatch_count += 1
                if len(res.offset_mismatches) < 20:
                    res.offset_mismatches.append((offset, stored))
            if start is None or offset >= start:
                res.records += 1
                res.bytes += n
                yield offset, f, pos, n
        res.valid_end = walk.offset
        if walk.stop is Stop.GAP:
            expected, found = walk.gap
            res.gap = walk.gap
            res.stop_kind = RecordKind.CORRUPT
            res.stop_reason = (f"file {self.file_for(found).name} does not follow the previous "
                               f"file (expected offset {expected})")
        elif walk.stop is not None:
            f = self.file_for(walk.offset)
            res.stop_kind = _KIND_OF_STOP[walk.stop]
            res.stop_reason = stop_reason(f.view, walk.offset - f.base, f.size, walk.stop,
                                          check_crc)

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
            self._index = [IndexReader(p) for p, _ in numbered_files(self.index_dir, is_index_file_name)]
        return self._index


def tail_after(reader: StoreReader, offset: int) -> tuple[int, int | None, int]:
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


"""Startup recovery of the commitlog, as RocketMQ does it (normal and abnormal).

- Normal (no `abort` marker: the last shutdown was clean): start from the last file whose first
  record is valid and that starts at or before where the consume queues end; scan with CRC.
- Abnormal (`abort` present): start from the last file whose first record is valid and was
  stored at or before the checkpoint's min timestamp (everything before it was flushed to the
  commitlog and dispatched to flushed consume queues); scan with CRC; re-dispatch from there
  (consume queues and the index skip what they already have).
Both: the first invalid record is the end. The torn tail is cut crash-safely (zeroed and synced,
later files deleted), consume queues and the index lose entries at or past the end, and reput
restarts from the dispatch point. Queue offsets are then rebuilt from the consume queues and
any records reput may not dispatch yet (beyond the confirm offset).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from . import codec
from .codec import RecordKind
from .commitlog.commitlog import CommitLog
from .commitlog.commitlog_walk import CommitLogWalk
from .commitlog.mapped_file import MappedFile

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    """What recovery found and did: normal or abnormal, the range of records it scanned and
    where the valid data ends (and how much was cut), where reput starts, and notes."""

    abnormal: bool
    start_offset: int = 0
    end_offset: int = 0
    previous_end: int = 0  # end of the written files before the cut (upper bound)
    records: int = 0
    reput_from: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def cut_bytes(self) -> int:
        return max(0, self.previous_end - self.end_offset)


def first_record_valid(f: MappedFile, check_crc: bool) -> bool:
    kind, _ = codec.check_record(f.view, 0, f.file_size, check_crc)
    return kind is RecordKind.RECORD


def first_store_timestamp(f: MappedFile) -> int:
    return codec.store_timestamp_at(f.view, 0)


def scan_valid_end(files: list[MappedFile], start: int, check_crc: bool,
                   verify_prop_crc: bool = False, progress=None) -> tuple[int, int]:
    """From files[start], the offset of the first byte that is not part of a valid record,
    and how many records were seen. A hole between files ends it too: nothing after it can be
    trusted."""
    walk = CommitLogWalk(check_crc=check_crc, verify_prop_crc=verify_prop_crc)
    count = 0
    for _ in walk.files(((f.file_from_offset, f.view, f.file_size) for f in files[start:]),
                        file_done=progress):
        count += 1
    return walk.offset, count


def choose_start(files: list[MappedFile], abnormal: bool, dispatch_from: int, min_timestamp: int,
                 check_crc: bool) -> int:
    for i in range(len(files) - 1, -1, -1):
        f = files[i]
        if not first_record_valid(f, check_crc):
            continue
        if abnormal:
            if first_store_timestamp(f) <= min_timestamp:
                return i
        elif f.file_from_offset <= dispatch_from:
            return i
    return 0


def recover_commitlog(commitlog: CommitLog, *, abnormal: bool, dispatch_from: int,
                      min_timestamp: int, check_crc: bool = True,
                      verify_prop_crc: bool = False, progress=None) -> RecoveryReport:
    """Find the valid end, cut the torn tail and set the file positions. Consume queues and
    the index are cut by the caller (MessageStore) to report.end_offset."""
    report = RecoveryReport(abnormal=abnormal)
    files = commitlog.queue.snapshot()
    if not files:
        return report
    report.previous_end = files[-1].file_from_offset + files[-1].file_size
    start = choose_start(files, abnormal, dispatch_from, min_timestamp, check_crc)
    report.start_offset = files[start].file_from_offset
    end, report.records = scan_valid_end(files, start, check_crc, verify_prop_crc, progress)
    report.end_offset = end
    # Cut crash-safely: zero the tail of the last file and drop later files. After a clean
    # shutdown there is nothing beyond the end, so only zero when something is there.
    last = commitlog.queue.find_by_offset(end)
    dirty = (last is None and end < report.previous_end) or len(
        [f for f in files if f.file_from_offset > end]) > 0
    if last is not None:
        pos = end - last.file_from_offset
        if abnormal or any(last.view[pos:min(pos + 4096, last.file_size)]):
            dirty = True
    if dirty:
        commitlog.truncate(end)
        report.notes.append(f"cut the commitlog at {end}")
    for f in commitlog.queue.snapshot():
        if f.file_from_offset + f.file_size <= end:
            f.set_positions(f.file_size)
        else:
            f.set_positions(end - f.file_from_offset)
    commitlog.queue.flushed_where = commitlog.queue.committed_where = end
    report.reput_from = report.start_offset if abnormal else min(dispatch_from, end)
    if report.reput_from < report.start_offset:
        report.reput_from = report.start_offset
    log.info("commitlog recovery (%s): scanned %d records from %d, end %d",
             "abnormal" if abnormal else "normal", report.records, report.start_offset, end)
    return report


def valid_end_from(commitlog: CommitLog, offset: int, check_crc: bool = True) -> int:
    """The end of the valid records that follow `offset` (a record boundary) up to the
    written end: where a replica's torn tail (a chunk that ended mid-record) begins."""
    end = commitlog.max_offset()
    walk = CommitLogWalk(check_crc=check_crc)
    for _ in walk.mapped(commitlog.queue, offset, end):
        pass
    return min(walk.offset, end)


def rebuild_queue_table(commitlog: CommitLog, cq_offsets: dict[tuple[str, int], int],
                        undispatched_from: int) -> dict[tuple[str, int], int]:
    """Next queue offset per topic-queue: the consume queues' ends, raised by records in
    [undispatched_from, end) that reput has not dispatched (beyond the confirm offset)."""
    table = dict(cq_offsets)
    walk = CommitLogWalk(decode=codec.dispatch_fields)
    for _, (_, qid, qo, sys_flag, _, _, topic, _, _) in walk.mapped(
            commitlog.queue, max(undispatched_from, commitlog.min_offset()), commitlog.max_offset()):
        t = sys_flag & codec.SysFlag.TRANSACTION_MASK
        if t not in (codec.SysFlag.TRANSACTION_PREPARED_TYPE, codec.SysFlag.TRANSACTION_ROLLBACK_TYPE):
            key = (topic, qid)
            if table.get(key, 0) < qo + 1:
                table[key] = qo + 1
    return table

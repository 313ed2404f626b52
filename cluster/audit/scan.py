"""Executor side: decode commitlog ranges with store.codec into small rows.

Every record is checked and parsed by store.codec (check_record, decode_dispatch_fields,
decode) along store.commitlog.commitlog_walk; nothing here decodes a record by itself. A task walks from
its start (a record boundary, checked) while the position is below its range end; a record that
starts in the range is read whole; the walk of a file stops at its first corrupt or empty record
or at the end-of-file BLANK filler.

Two modes. `summarize` (pass 1, every byte) emits SUMMARY_COLUMNS rows; record data stays in the
task:
    kind     columns
    end      phys = stop offset, topic = stop kind (END: end of file, RANGE: end of the task's
             range, BLANK, EMPTY, CORRUPT, NEED_MORE), a1 = task start offset, a2 = records
    resplit  phys = task start: the range does not start (or end) on a record boundary of the
             file; the driver scans the whole file as one task instead
    corrupt  phys, topic/queue_id/queue_offset (when the structure is intact), a1 = size, reason
    digest   per bucket touched by the task: phys = first record offset in it, a1 = bucket,
             a2 = records, a3 = XOR of digest.record_hash, a4 = dispatchable valid records,
             a5 = XOR of digest.cq_hash over them
    qgap     a record whose queue offset does not follow the previous record of its queue in
             this task: phys, topic, queue_id, queue_offset, a1 = previous queue offset,
             a2 = previous offset
    qedge    per queue: phys/queue_offset of its first record in the task, a1/a2 = queue offset
             and offset of its last (the checks stitch consecutive tasks)
    keys     per queue: phys = first offset, hashes = digest.key_hash of each unique key,
             offsets = the records' offsets (duplicate candidates)
    table    a record of a replicated table's internal topic (TABLE_TOPICS: the topic table,
             the consumer state): phys, topic, queue_id, queue_offset, a1 = TABLE_SNAPSHOT /
             TABLE_DELETE / TABLE_OTHER from its tag (the event kind), a2 = size, reason = the
             body (the event's JSON; bodies are small). Every valid one is emitted; the driver
             decides which it replays (cluster.audit.metadata).
`record_rows` (pass 2, dirty buckets and single records; the reference) emits RECORD_COLUMNS
rows: kind ok (a valid record) or corrupt (size, rec_crc and the dispatch fields filled when
only the body CRC is wrong), plus the end/resplit rows of the summary (same columns).
"""
from __future__ import annotations

import mmap
import os
import struct
import zlib
from typing import Iterator, NamedTuple

from store import codec
from store.codec import RecordKind
from store.commitlog.commitlog_walk import CommitLogWalk, Stop, stop_reason
from store.config import StoreConfig
from store.codec.dispatch import SCHEDULE_TOPIC, delay_level_lookup, schedule_tags_code

from cluster.consume.records import STATE_TOPIC
from cluster.metadata.topic_state import TOPIC_TABLE_TOPIC


SUMMARY_COLUMNS = (
    ("replica", "string"), ("file_base", "bigint"), ("kind", "string"), ("phys", "bigint"),
    ("topic", "string"), ("queue_id", "int"), ("queue_offset", "bigint"), ("a1", "bigint"),
    ("a2", "bigint"), ("a3", "bigint"), ("a4", "bigint"), ("a5", "bigint"), ("reason", "string"),
    ("hashes", "array<bigint>"), ("offsets", "array<bigint>"))
RECORD_COLUMNS = (
    ("replica", "string"), ("file_base", "bigint"), ("phys", "bigint"), ("size", "int"),
    ("rec_crc", "bigint"), ("body_crc", "bigint"), ("topic", "string"), ("queue_id", "int"),
    ("queue_offset", "bigint"), ("sys_flag", "int"), ("store_ts", "bigint"),
    ("uniq_key", "string"), ("tag_hash", "bigint"), ("kind", "string"), ("reason", "string"),
    ("a1", "bigint"), ("a2", "bigint"))
OK, CORRUPT, END, RESPLIT = "ok", "corrupt", "end", "resplit"
DIGEST, QGAP, QEDGE, KEYS, TABLE = "digest", "qgap", "qedge", "keys", "table"
# The replicated tables whose records the audit replays (cluster.audit.metadata).
TABLE_TOPICS = frozenset({TOPIC_TABLE_TOPIC, STATE_TOPIC})
TABLE_OTHER, TABLE_SNAPSHOT, TABLE_DELETE = 0, 1, 2  # a1 of a table row
# Where the scan of a file stopped for good (RANGE and END are not stops inside the data).
DATA_STOPS = ("BLANK", "EMPTY", "CORRUPT", "NEED_MORE")
# Schedule-topic units carry a delivery time instead of a tag hash (computed with the default
# delay levels; the checks do not compare it).
DEFAULT_DELAY_LEVELS_MS = StoreConfig().delay_levels_ms()
_BODY_CRC = struct.Struct(">i")  # codec's layout table: bodyCRC, i32 at offset 8
_BODY_CRC_POS = 8


class CommitLogTask(NamedTuple):
    replica: str
    path: str
    base: int  # file's first physical offset
    start: int  # position in the file where the task starts (a record boundary)
    end: int  # position where the task stops starting records (the file size for the last)
    file_size: int


def plan_commitlog_tasks(replica: str, files, cuts: dict[int, list[int]],
                         whole: frozenset[int] = frozenset()) -> list[CommitLogTask]:
    """One task per file, or per range between the candidate boundaries `cuts[file base]`
    (physical offsets); files whose base is in `whole` are always one task."""
    tasks = []
    for f in files:
        bounds = [0] + ([c - f.base for c in cuts.get(f.base, ())] if f.base not in whole else [])
        bounds.append(f.size)
        for a, b in zip(bounds, bounds[1:]):
            tasks.append(CommitLogTask(replica, f.path, f.base, a, b, f.size))
    return tasks


def _tag_hash(topic: str, props: dict, store_ts: int, cache: dict, delay_ms) -> int:
    if topic == SCHEDULE_TOPIC:
        return schedule_tags_code(props, store_ts, delay_ms)
    tag = props.get(codec.PROPERTY_TAGS)
    if not tag:
        return 0
    h = cache.get(tag)
    if h is None:
        h = cache[tag] = codec.tags_code(tag)
    return h


def table_row(task: CommitLogTask, view, pos: int, n: int, topic: str, qid: int, qo: int,
              props: dict) -> tuple:
    """The table row of a valid record of a table topic (SUMMARY_COLUMNS order)."""
    tag = props.get(codec.PROPERTY_TAGS)
    mark = TABLE_SNAPSHOT if tag == "snapshot" else TABLE_DELETE if tag == "delete" else TABLE_OTHER
    body = codec.decode(view, pos, pos + n, check_crc=False).body
    return (task.replica, task.base, TABLE, task.base + pos, topic, qid, qo, mark, n, None, None,
            None, body.decode("utf-8", "replace"), None, None)


def _opened(task: CommitLogTask, body, width: int = 0):
    """Map the task's file and run `body(view, size)`; an empty file yields an end row."""
    with open(task.path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0 or task.start >= size:
            yield _end(task, task.base + min(task.start, size), "END", 0, "end of file", width)
            return
        mm = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)
        view = memoryview(mm)
        try:
            yield from body(view, size)
        finally:
            view.release()
            try:
                mm.close()
            except BufferError:  # a slice still alive somewhere: the GC unmaps it later
                pass


def _end(task: CommitLogTask, stop: int, stop_kind: str, count: int, reason: str, width: int = 0) -> tuple:
    """An end row, in SUMMARY_COLUMNS order (width=0) or RECORD_COLUMNS order (width=1)."""
    if width:
        return (task.replica, task.base, stop, None, None, None, stop_kind, None, None, None, None,
                None, None, END, reason, task.base + task.start, count)
    return (task.replica, task.base, END, stop, stop_kind, None, None, task.base + task.start, count,
            None, None, None, reason, None, None)


def _resplit(task: CommitLogTask, reason: str, width: int = 0) -> tuple:
    if width:
        return (task.replica, task.base, task.base + task.start, None, None, None, None, None, None,
                None, None, None, None, RESPLIT, reason, None, None)
    return (task.replica, task.base, RESPLIT, task.base + task.start, None, None, None, None, None,
            None, None, None, reason, None, None)


def _bad_start(view, size: int, task: CommitLogTask) -> str | None:
    """Why a range start is not a record boundary, or None."""
    if task.start == 0:
        return None
    first = codec.decode(view, task.start, size, read_body=False)
    if isinstance(first, codec.MessageRecord) and first.physical_offset == task.base + task.start:
        return None
    what = (f"record stores physical offset {first.physical_offset}"
            if isinstance(first, codec.MessageRecord) else first.kind.name.lower())
    return f"task start {task.base + task.start} is not a record boundary ({what})"


def _stop(walk: CommitLogWalk, view, size: int, delay_ms):
    """(position, stop kind, reason, corrupt record fields or None) where a walk stopped in the
    data or at a BLANK; None when it reached the end of its range or file."""
    if walk.blank_at is not None:
        return walk.blank_at - walk.base, "BLANK", "end-of-file blank", None
    if walk.stop is None or not walk.stop.in_data:
        return None
    pos = walk.offset - walk.base
    kind = walk.stop
    reason = stop_reason(view, pos, size, kind, check_crc=True)
    if kind is Stop.EMPTY:
        return pos, "EMPTY", reason, None
    k, n = codec.check_record(view, pos, size, check_crc=False)
    if k is not RecordKind.RECORD:  # the structure itself is broken: nothing to trust
        return pos, kind.name, reason, None
    qid, qo, sf, ts, _, topic, props = codec.decode_dispatch_fields(view, pos, n)
    return pos, kind.name, f"body CRC mismatch in record of {n} bytes", (
        n, zlib.crc32(view[pos:pos + n]), _BODY_CRC.unpack_from(view, pos + _BODY_CRC_POS)[0], topic,
        qid, qo, sf, ts, props.get(codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        _tag_hash(topic, props, ts, {}, delay_ms))


def _range_end(task: CommitLogTask, pos: int, size: int, count: int, width: int,
               exact_end: bool = True) -> Iterator[tuple]:
    if pos >= size:
        yield _end(task, task.base + size, "END", count, "end of file", width)
        return
    if exact_end and pos != task.end:
        yield _resplit(task, f"the record before {task.base + task.end} runs on to {task.base + pos}: "
                             f"the next task's start is not on this file's record chain", width)
    yield _end(task, task.base + pos, "RANGE", count, "end of the task's range", width)


def record_rows(task: CommitLogTask, delay_levels=DEFAULT_DELAY_LEVELS_MS,
                chained: bool = False) -> Iterator[tuple]:
    """RECORD_COLUMNS rows of every record of the task (see the module docstring). `chained`
    (pass 2): the start is a record pass 1 reached along the file's record chain, so it is not
    checked again, and the range end (a bucket end) need not be a record boundary."""
    replica, base = task.replica, task.base

    def body(view, size):
        why = None if chained else _bad_start(view, size, task)
        if why:
            yield _resplit(task, why, 1)
            return
        fields, crc32 = codec.decode_dispatch_fields, zlib.crc32
        body_crc = _BODY_CRC.unpack_from
        uniq = codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
        delay_ms, tags = delay_level_lookup(delay_levels), {}
        walk, count = CommitLogWalk(check_crc=True), 0
        for phys, n in walk.file(view, base, task.start, size, size, min(task.end, size)):
            pos = phys - base
            qid, qo, sf, ts, _, topic, props = fields(view, pos, n)
            yield (replica, base, phys, n, crc32(view[pos:pos + n]),
                   body_crc(view, pos + _BODY_CRC_POS)[0], topic, qid, qo, sf, ts, props.get(uniq),
                   _tag_hash(topic, props, ts, tags, delay_ms), OK, None, None, None)
            count += 1
        stop = _stop(walk, view, size, delay_ms)
        if stop is not None:
            pos, kind, reason, rec = stop
            if kind not in ("BLANK", "EMPTY"):
                yield (replica, base, base + pos, *(rec or (None,) * 10), CORRUPT, reason, None, None)
            yield _end(task, base + pos, kind, count, reason, 1)
            return
        yield from _range_end(task, walk.offset - base, size, count, 1, exact_end=not chained)

    yield from _opened(task, body, 1)


def record_rows_bins(task_bins, delay_levels=DEFAULT_DELAY_LEVELS_MS) -> Iterator[tuple]:
    """mapPartitions function of pass 2: record rows of the bucket ranges of the partition."""
    for bin_ in task_bins:
        for task in bin_:
            yield from record_rows(CommitLogTask(*task), delay_levels, chained=True)


def bins(tasks: list, weight, count: int) -> list[list]:
    """Group tasks into at most `count` bins of similar total weight (largest first into the
    lightest bin), the bins themselves largest first: one bin becomes one Spark partition."""
    loads = [[0, i, []] for i in range(max(1, min(count, len(tasks))))]
    for t in sorted(tasks, key=weight, reverse=True):
        lightest = min(loads, key=lambda x: (x[0], x[1]))
        lightest[0] += weight(t)
        lightest[2].append(t)
    return [b for _, _, b in sorted(loads, key=lambda x: -x[0]) if b]

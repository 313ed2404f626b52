"""Executor side: read consume queue files (20-byte units: phys i64, size i32, tag hash i64).

A unit that is not valid (all zero: never written) ends the file, as in recovery; filler units
are skipped but counted; units below the replica's commitlog min offset are expired (counted).
Pass 1 (`summarize_cq`) emits CQ_COLUMNS rows of kind
    stats    per file: queue_offset = index after the last written unit, a1 = real units,
             a2 = fillers, a3 = expired units, a4 = index of the first unit still in the
             commitlog (null if none)
    udigest  per bucket: a1 = bucket, a2 = units, a3 = XOR of digest.cq_hash
Pass 2 (`unit_rows`) emits kind unit rows (queue_offset, phys, size, tag_hash) of the live
units in the given buckets (all buckets when None).
"""
from __future__ import annotations

from typing import Iterator, NamedTuple

from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, CQ_UNIT, FILLER_SIZE

from cluster.audit import digest

CQ_COLUMNS = (
    ("replica", "string"), ("topic", "string"), ("queue_id", "int"), ("kind", "string"),
    ("queue_offset", "bigint"), ("phys", "bigint"), ("size", "int"), ("tag_hash", "bigint"),
    ("a1", "bigint"), ("a2", "bigint"), ("a3", "bigint"), ("a4", "bigint"))
UNIT, STATS, UDIGEST = "unit", "stats", "udigest"


class CQTask(NamedTuple):
    replica: str
    topic: str
    queue_id: int
    path: str
    base: int  # byte offset of the file's first unit in the queue
    min_phys: int  # the replica's commitlog min offset: units below it are expired


def plan_cq_tasks(replica: str, cq_files, min_phys: int) -> list[CQTask]:
    return [CQTask(replica, f.topic, f.queue_id, f.path, f.base, min_phys) for f in cq_files]


def _units(task: CQTask) -> Iterator[tuple[int, int, int, int]]:
    """(index, phys, size, tag) of every written unit, fillers included."""
    with open(task.path, "rb") as fh:
        data = fh.read()
    index = task.base // CQ_STORE_UNIT_SIZE
    for phys, size, tag in CQ_UNIT.iter_unpack(memoryview(data)[:len(data) - len(data) % CQ_STORE_UNIT_SIZE]):
        if phys < 0 or size <= 0:  # not valid (all zero: never written): the file ends here
            return
        yield index, phys, size, tag
        index += 1


def summarize_cq(task: CQTask, bucket_bytes: int | None) -> Iterator[tuple]:
    """Pass-1 rows of one file; bucket_bytes None: the stats row only (no digests)."""
    if bucket_bytes is not None:
        digest.require_fixed_seed()
    replica, topic, qid, _, base, min_phys = task
    cq_hash = digest.cq_hash
    end = base // CQ_STORE_UNIT_SIZE
    units = fillers = expired = 0
    live = None
    buckets: dict[int, list[int]] = {}
    for index, phys, size, tag in _units(task):
        end = index + 1
        if phys == 0 and size == FILLER_SIZE:
            fillers += 1
            continue
        units += 1
        if phys < min_phys:
            expired += 1
            continue
        if live is None:
            live = index
        if bucket_bytes is None:
            continue
        b = buckets.get(phys // bucket_bytes)
        if b is None:
            b = buckets[phys // bucket_bytes] = [0, 0]
        b[0] += 1
        b[1] ^= cq_hash(phys, topic, qid, index, size, tag)
    yield (replica, topic, qid, STATS, end, None, None, None, units, fillers, expired, live)
    for bucket, (n, x) in buckets.items():
        yield (replica, topic, qid, UDIGEST, None, None, None, None, bucket, n, x, None)


def unit_rows(task: CQTask, bucket_bytes: int, buckets: frozenset[int] | None = None) -> Iterator[tuple]:
    replica, topic, qid, _, _, min_phys = task
    for index, phys, size, tag in _units(task):
        if (phys == 0 and size == FILLER_SIZE) or phys < min_phys:
            continue
        if buckets is None or phys // bucket_bytes in buckets:
            yield (replica, topic, qid, UNIT, index, phys, size, tag, None, None, None, None)


def summarize_cq_bins(task_bins, bucket_bytes: int) -> Iterator[tuple]:
    for bin_ in task_bins:
        for task in bin_:
            yield from summarize_cq(CQTask(*task), bucket_bytes)


def unit_rows_bins(task_bins, bucket_bytes: int, dirty: dict[str, frozenset[int]]) -> Iterator[tuple]:
    """mapPartitions function of pass 2: units of the dirty buckets of each task's replica."""
    for bin_ in task_bins:
        for task in bin_:
            task = CQTask(*task)
            if dirty.get(task.replica):
                yield from unit_rows(task, bucket_bytes, dirty[task.replica])

"""Rebuilding the duplicate window when a store opens: reput restarts from its checkpoint, so
the ids of the sends stored in the last `duplicateWindowSeconds` are read back from the
commitlog itself, before the store serves or writes anything.

Where the walk starts: at the first record stored at or after now - window that a consume
queue of a client send lists (client topics, the schedule and the half topic), found by one
binary search per queue over the store times of its records (ConsumeQueue.offset_for_timestamp,
RocketMQ's getOffsetInQueueByTime). When those queues list more units since then than the
window may hold (duplicateWindowMaxEntries), the start moves later, to the time from which
they list about that many (a binary search over time, each step counting every queue's units
from it): the walk then reads about as many sends as the window keeps, not all of a busy
window's. The records past the queues' end (not dispatched yet) are walked whatever their age.

The walk is the commitlog's one walk (commitlog_walk, with reput's dispatch decode), in batches
to the window (`DuplicateWindow.feed_walked`), which keeps only what is still in the window and
skips the records that are not client sends.

Cost (tests/perf/bench_dedup_rebuild.py measures a full window and prints it): the search
reads a few store times per queue and step; the walk decodes each record once.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable, Iterable, NamedTuple

from store import codec
from store.codec.dispatch import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from store.commitlog.commitlog_walk import CommitLogWalk

from .window import DuplicateWindow, client_topic

if TYPE_CHECKING:
    from store.commitlog.mapped_file_queue import MappedFileQueue
    from store.queue.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)
StoreTimeOf = Callable[[int, int], "int | None"]
_BATCH = 4096  # records per feed


class Rebuilt(NamedTuple):
    """What a rebuild did: the commitlog range it walked, the records read, the entries the
    window holds afterwards and the seconds it took (the start's search included)."""

    start: int
    end: int
    records: int
    entries: int
    seconds: float


def walk_start(queues: Iterable["ConsumeQueue"], store_time_of: StoreTimeOf, since_ms: int,
               now_ms: int, max_entries: int, dispatched: int) -> int:
    """Where the rebuild's walk starts (see the module docstring): the offset of the first
    record stored at or after `since_ms` (or later, for the bound) that a queue of a client
    send lists; `dispatched` (the queues' end) when there is none."""
    queues = [cq for cq in queues
              if cq.topic in (SCHEDULE_TOPIC, TRANS_HALF_TOPIC) or client_topic(cq.topic)]

    def units_since(t: int) -> int:
        return sum(cq.max_offset() - cq.offset_for_timestamp(t, store_time_of) for cq in queues)

    if units_since(since_ms) > max_entries:
        lo, hi = since_ms, now_ms  # the latest time from which at least max_entries are listed
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if units_since(mid) >= max_entries:
                lo = mid
            else:
                hi = mid - 1
        since_ms = lo
    start = dispatched
    for cq in queues:
        index = cq.offset_for_timestamp(since_ms, store_time_of)
        unit = cq.get_unit(index) if index < cq.max_offset() else None
        if unit is not None and unit[0] < start:
            start = unit[0]
    return start


def rebuild(window: DuplicateWindow, files: "MappedFileQueue", start: int, end: int,
            began: float | None = None) -> Rebuilt:
    """Feed the window the records of the commitlog `files` in [start, end) and mark it fed
    up to `end`. Call before anything else walks or writes the log (a store's load)."""
    began = time.perf_counter() if began is None else began
    walk = CommitLogWalk(decode=codec.dispatch_fields)
    records = walk.mapped(files, start, end)
    count = 0
    batch: list[tuple[int, tuple]] = []
    try:
        for record in records:
            batch.append(record)
            if len(batch) == _BATCH:
                count += _feed(window, batch)
                batch = []
    finally:
        records.close()
    if batch:
        count += _feed(window, batch)
    window.caught_up(end)
    done = Rebuilt(start, end, count, len(window), time.perf_counter() - began)
    if count:
        log.info("duplicate window rebuilt from the commitlog [%d, %d): %d records read, %d ids "
                 "held, %.2f s", start, end, count, done.entries, done.seconds)
    return done


def _feed(window: DuplicateWindow, batch: list[tuple[int, tuple]]) -> int:
    offset, fields = batch[-1]
    window.feed_walked(batch, offset + fields[0])  # fed up to the last record's end
    return len(batch)

"""Rebuilding the duplicate window when a store opens: reput restarts from its checkpoint, so
the ids of the sends stored in the last `duplicateWindowSeconds` are read back from the
commitlog itself, before the store serves or writes anything.

Where the walk starts: the first record stored at or after now - window that a consume queue
lists, found by one binary search per queue over the store timestamps of its records
(ConsumeQueue.offset_for_timestamp, RocketMQ's getOffsetInQueueByTime), over the queues that
can hold a client send only (client topics, the schedule and the half topic); the records
past the queues' end (not dispatched yet) are walked whatever their age. The walk is reput's
own (ReputService.requests_between: commitlog_walk with the dispatch decode), and its batches
go to the window as reput's would (`DuplicateWindow.feed`), which keeps only what is still in
the window and skips the records that are not client sends.

Cost: the search reads a few store timestamps per queue (log2 of its length); the walk decodes
every record of the window, about 2 µs each (tests/store/test_dedup_rebuild.py measures a full
window and prints it).
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, NamedTuple

from store.codec.dispatch import SCHEDULE_TOPIC, TRANS_HALF_TOPIC

from .window import DuplicateWindow, client_topic

if TYPE_CHECKING:
    from store.codec.dispatch import DispatchRequest
    from store.queue.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)


class Rebuilt(NamedTuple):
    """What a rebuild did: the commitlog range it walked, the records read, the entries the
    window holds afterwards and the seconds it took."""

    start: int
    end: int
    records: int
    entries: int
    seconds: float


def first_offset_since(queues: Iterable["ConsumeQueue"],
                       store_time_of: Callable[[int, int], int | None], since_ms: int,
                       end: int) -> int:
    """The commitlog offset of the first record stored at or after `since_ms` that one of the
    queues of a client send lists; `end` when there is none below it."""
    start = end
    for cq in queues:
        if not (cq.topic in (SCHEDULE_TOPIC, TRANS_HALF_TOPIC) or client_topic(cq.topic)):
            continue
        index = cq.offset_for_timestamp(since_ms, store_time_of)
        unit = cq.get_unit(index) if index < cq.max_offset() else None
        if unit is not None and unit[0] < start:
            start = unit[0]
    return start


def rebuild(window: DuplicateWindow, start: int, end: int,
            requests_between: Callable[[int, int], Iterator[list["DispatchRequest"]]]
            ) -> Rebuilt:
    """Feed the window the records of [start, end) (a store's tail, read by
    `requests_between`: ReputService's, under reput's lock) and mark it fed up to `end`."""
    began = time.perf_counter()
    records = 0
    for batch in requests_between(start, end):
        window.feed(batch)
        records += len(batch)
    window.caught_up(end)
    done = Rebuilt(start, end, records, len(window), time.perf_counter() - began)
    if records:
        log.info("duplicate window rebuilt from the commitlog [%d, %d): %d records read, %d ids "
                 "held, %.2f s", start, end, records, done.entries, done.seconds)
    return done

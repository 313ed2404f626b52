"""The delivery state of the schedule service (schedule.py), without I/O: the next offset of
every delay-level queue and, for the timestamp queue (not in delivery order), its watermark,
the units read ahead into a heap by delivery time, and which units above the watermark were
delivered. The service reads units from the consume queues and appends the deliveries; this
object decides what is due, and what the offsets file and each progress record say.

The table (delayOffset.json, and the body of a progress record), in RocketMQ's format plus our
optional key:

    {"offsetTable": {"<level>": nextOffset, ...},        level = queue id + 1
     "timerQueueState": {"scanOffset": n, "pending": [index, ...]}}

- offsetTable: per level the next queue offset to deliver; for the timestamp queue (level
  len(levels) + 1) its watermark, the lowest index not yet delivered. Keys that are not a
  level of ours are kept as found.
- timerQueueState: how far the timestamp queue was read ahead (scanOffset) and which indexes
  below that were read but not delivered (pending): on load, the indexes in [watermark,
  scanOffset) that are not pending were delivered and are skipped. Written only while at most
  TIMER_STATE_PERSIST_MAX are pending; without it a restart redelivers what was delivered
  above the watermark (at least once).

The service guards this object with its lock.
"""
from __future__ import annotations

import heapq
from typing import Any

TIMER_STATE_PERSIST_MAX = 1024

# A unit read ahead from the timestamp queue: (deliver_ms, index, commitlog offset, size).
TimerUnit = tuple[int, int, int, int]


class ScheduleState:
    """Owns the offsets, the timestamp queue's heap and its delivered-above-watermark marks;
    `dirty` says the offsets file is behind."""

    def __init__(self, timer_qid: int) -> None:
        self.timer_qid = timer_qid
        self.offsets: dict[int, int] = {}  # queue id -> next offset (timer queue: watermark)
        self.foreign: dict[str, Any] = {}  # offsetTable keys that are not ours, kept as found
        self.scan = 0  # next timestamp-queue index to read ahead
        self.heap: list[TimerUnit] = []
        self.pending: set[int] = set()  # indexes read ahead, not delivered
        self._index_heap: list[int] = []  # pending indexes, lazily cleaned
        self.skip_below = 0  # indexes in [watermark, skip_below) not in keep were delivered
        self.keep: set[int] = set()
        self.dirty = False

    # -- the table ------------------------------------------------------------------------------
    def apply_table(self, data: dict[str, Any]) -> None:
        """Replace the whole state with `data` (the table above): the timestamp queue is read
        again from its watermark, skipping what timerQueueState says was delivered above it.
        ValueError/TypeError/AttributeError on a malformed table (nothing changed then)."""
        offsets: dict[int, int] = {}
        foreign: dict[str, Any] = {}
        skip_below, keep = 0, set()
        table = data.get("offsetTable", {})
        if not isinstance(table, dict):
            raise ValueError("offsetTable is not an object")
        for key, value in table.items():
            level = int(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"offset of level {key} is {value!r}")
            if 1 <= level <= self.timer_qid + 1:
                offsets[level - 1] = value
            else:
                foreign[key] = value
        state = data.get("timerQueueState")
        watermark = offsets.get(self.timer_qid, 0)
        if isinstance(state, dict):
            scan = int(state.get("scanOffset", 0))
            pending = {int(i) for i in state.get("pending", [])}
            if scan > watermark:
                skip_below, keep = scan, {i for i in pending if watermark <= i < scan}
        self.offsets, self.foreign = offsets, foreign
        self.skip_below, self.keep = skip_below, keep
        self.scan = watermark
        self.heap, self.pending, self._index_heap = [], set(), []

    def encode(self) -> dict[str, Any]:
        """The table of the current state."""
        table: dict[str, Any] = dict(self.foreign)
        for qid, off in self.offsets.items():
            table[str(qid + 1)] = off
        data: dict[str, Any] = {"offsetTable": table}
        watermark = self.offsets.get(self.timer_qid, 0)
        pending = sorted(self.pending | {i for i in self.keep if i >= watermark})
        horizon = max(self.scan, self.skip_below)
        if horizon > watermark and len(pending) <= TIMER_STATE_PERSIST_MAX:
            data["timerQueueState"] = {"scanOffset": horizon, "pending": pending}
        return data

    def offset(self, qid: int) -> int:
        return self.offsets.get(qid, 0)

    def set_offset(self, qid: int, off: int) -> None:
        if self.offsets.get(qid) != off:
            self.offsets[qid] = off
            self.dirty = True

    def levels_table(self) -> dict[int, int]:
        """{level (1-based; the timestamp queue is len(levels) + 1): next offset}."""
        return {qid + 1: off for qid, off in sorted(self.offsets.items())}

    # -- the timestamp queue --------------------------------------------------------------------
    def watermark(self) -> int:
        """The lowest timestamp-queue index not yet delivered."""
        while self._index_heap and self._index_heap[0] not in self.pending:
            heapq.heappop(self._index_heap)
        return self._index_heap[0] if self._index_heap else self.scan

    def within(self, lo: int, hi: int) -> bool:
        """The timestamp queue now holds indexes [lo, hi): read on from lo at least, and
        forget what was read ahead past hi (recovery cut the queue). True when it was cut."""
        cut = self.scan > hi
        if cut:
            self.truncated_to(hi)
        if self.scan < lo:
            self.scan = lo
        return cut

    def truncated_to(self, end: int) -> None:
        """The timestamp queue now ends at `end` (recovery cut it): forget what is gone."""
        self.scan = end
        self.heap = [e for e in self.heap if e[1] < end]
        heapq.heapify(self.heap)
        self.pending = {i for i in self.pending if i < end}
        self.skip_below = min(self.skip_below, end)

    def read_ahead(self, index: int, deliver_ms: int, phy: int, size: int) -> int:
        """The unit at `index` was read: into the heap unless it was delivered before a
        restart. Returns how many indexes reading it passed."""
        passed = max(1, index + 1 - self.scan)
        self.scan = index + 1
        self.dirty = True
        if index < self.skip_below and index not in self.keep:
            return passed
        heapq.heappush(self.heap, (deliver_ms, index, phy, size))
        heapq.heappush(self._index_heap, index)
        self.pending.add(index)
        return passed

    def take_due(self, now_ms: int, most: int) -> tuple[list[TimerUnit], set[int], int]:
        """Up to `most` due units, earliest first, marked delivered (the watermark moves past
        them, as the progress record of their batch says). Returns (units, the delivered
        marks they used, the watermark before) for `undo` when their batch fails."""
        units: list[TimerUnit] = []
        while self.heap and self.heap[0][0] <= now_ms and len(units) < most:
            units.append(heapq.heappop(self.heap))
        indexes = [e[1] for e in units]
        kept = self.keep.intersection(indexes)
        before = self.offsets.get(self.timer_qid, 0)
        self.pending.difference_update(indexes)
        self.keep.difference_update(indexes)
        self.set_offset(self.timer_qid, self.watermark())
        self.dirty = True  # the delivered marks changed, whether the watermark moved or not
        return units, kept, before

    def undo(self, units: list[TimerUnit], kept: set[int], before: int) -> None:
        """take_due's units were not delivered: pending again."""
        for e in units:
            heapq.heappush(self.heap, e)
            heapq.heappush(self._index_heap, e[1])
        self.pending.update(e[1] for e in units)
        self.keep |= kept
        self.set_offset(self.timer_qid, before)

    def due(self, now_ms: int) -> bool:
        return bool(self.heap) and self.heap[0][0] <= now_ms

    def skips_done(self) -> None:
        """Read ahead past every index delivered before the restart: the marks can go."""
        if self.skip_below <= self.scan and self.skip_below:
            self.skip_below, self.keep = 0, set()
            self.dirty = True

    def earliest_ms(self) -> int | None:
        """Delivery time of the earliest unit read ahead (None: none)."""
        return self.heap[0][0] if self.heap else None

"""Delay-level and deliver-at messages: RocketMQ's ScheduleMessageService, delivery side.

Put side (schedule_rewrite.py): a delayed message is stored as a copy in the schedule topic
SCHEDULE_TOPIC_XXXX, with its delivery time as the consume-queue tagsCode, so the service
below finds due messages from the consume queue alone.

Delivery side (`ScheduleService`, a Service; `attach(store)` registers it with the store).
Each `step()`, for every schedule queue, reads units from the queue's next offset and, for the
due ones (up to 64 at a time), loads each record, rebuilds the real message (topic REAL_TOPIC,
queue REAL_QID; DELAY, TIMER_*, REAL_*, WAIT and the property-CRC tail removed; everything else,
including UNIQ_KEY, KEYS, TAGS, body, flag, sysFlag, born timestamp/host and reconsume times,
unchanged) and appends them in ONE batch with a progress record (below): the progress
replicates with the deliveries it describes.

Progress records (the progress replicates with the data): the internal topic
`rmq_sys_SCHEDULE_PROGRESS`, queue 0, one record per delivery batch, last in the batch:

    field        value
    topic        rmq_sys_SCHEDULE_PROGRESS (a reserved system topic)
    queue id     0
    tag (TAGS)   progress
    body         UTF-8 JSON, the offsets after the batch, in delayOffset.json's format:
                 {"offsetTable": {"<level>": nextOffset, ...},
                  "timerQueueState": {"scanOffset": n, "pending": [index, ...]}}  (optional)

A batch is appended under the commitlog's put lock as contiguous records, so a replica that
holds the progress record holds every delivery before it; a replica that holds only part of a
batch (a chunk ended inside it) has the previous progress record, and redelivers that part.
A node that becomes master (and a store that starts as one) restores its progress from the
newest progress record of its log, after `prepare_for_writes` dispatched everything it holds
(`MessageStore.ready_generation`): it neither redelivers what the old master delivered (beyond
at-least-once for a partly replicated last batch) nor skips anything (a record is never ahead of
the deliveries in the log). With no progress record (a store from before them, or retention
deleted them all) the state loaded from delayOffset.json stays. A slave delivers nothing and
follows the newest progress record it dispatched (up to its confirm offset), keeping
delayOffset.json as a view.

- At least once, never skipped: the offsets move past units only once their batch answered
  PUT_OK. Any other answer (store not writable, flush failure or timeout, ...) undoes the
  batch's move and stops that queue for this round; the same units are retried next round. A
  flush timeout may therefore deliver twice. The WAIT property is removed, so under SYNC_FLUSH
  delivery waits for the flush.
- Dropped (logged, counted in `stats.dropped`), like RocketMQ's "messageTimeup execute error,
  drop it": a record that can no longer be read (its commitlog file was deleted), one without a
  usable REAL_TOPIC / REAL_QID or with a system topic as REAL_TOPIC, and one the store refuses
  for good (MESSAGE_ILLEGAL, PROPERTIES_SIZE_EXCEEDED: the queue's batch is then retried one
  message at a time, and the one refused alone is dropped). Retrying those would block the
  queue forever; the offsets move past them with the next progress record.
- Level queues are in delivery order (same delay, store-time order), so a round stops at the
  first unit not yet due. A tagsCode more than the level's delay ahead of now (the clock went
  backwards, or the level was shortened) counts as due (RocketMQ correctDeliverTimestamp).
- The timestamp queue is not in delivery order. Units are read ahead into an in-memory heap
  (delivery time, queue index), at most `max_timer_pending` of them, and due ones are delivered
  earliest first, so a message due in 3 days never holds back one due in 3 seconds (unless the
  heap is full: then reading ahead pauses until some are delivered). Its persisted offset is the
  watermark, the lowest index not yet delivered; what was delivered above it is remembered
  while few are pending (schedule_state.py, which holds this state and its table format).
- The view: offsets are written, when a round changed them, to `<root>/config/delayOffset.json`
  (the table of schedule_state.py, RocketMQ's format plus our "timerQueueState" key), loaded at
  construction (the state until a progress record says otherwise). Each round raises an offset
  below its queue's min offset to the min (files deleted by retention) and lowers one above its
  max offset to the max (a queue truncated by recovery), RocketMQ's correctDelayOffset. A
  failed write is logged and retried next round.
- A store whose broker_role is SLAVE delivers nothing (the master's deliveries replicate).
- If `message_delay_level` changes the number of levels, the timestamp queue id moves with it;
  change the level count only with an empty timestamp queue.
"""
from __future__ import annotations

import enum
import json
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store import codec
from store.codec import Message
from store.codec.dispatch import SCHEDULE_TOPIC
from store.errors import CorruptFile, DiskError, MessageIllegal
from store.json_config import JsonConfigFile
from store.layout import StoreLayout
from store.put_result import PutStatus
from .schedule_rewrite import rebuild_real_message, timer_queue_id
from .schedule_state import ScheduleState
from common.service import Service
from store.validation import check_topic

if TYPE_CHECKING:
    from common.clock import Clock
    from store.message_store import MessageStore

log = logging.getLogger(__name__)

PROGRESS_TOPIC = "rmq_sys_SCHEDULE_PROGRESS"
PROGRESS_TAG = "progress"
_BATCH = 64
_MAX_PER_ROUND = 1024  # units handled per queue per step; more -> wakeup() for another round
_PERMANENT_REFUSALS = (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED)


class _Outcome(enum.Enum):
    DONE = "done"
    FAILED = "failed"
    SPLIT = "split"


# -- delivery side --------------------------------------------------------------------------
@dataclass
class ScheduleStats:
    """The schedule service's counters since it started (written by its thread): messages
    delivered and dropped, failed puts (and the last reason), failed view writes."""

    delivered: int = 0
    dropped: int = 0
    put_failures: int = 0
    last_failure: str = ""
    persist_failures: int = 0


class ScheduleService(Service):
    """Delivers the due messages of the schedule topic's queues (the delivery side of the module
    docstring). Owns the delivery state (`state`: each level queue's next offset and the
    timestamp queue's read-ahead heap), its view file delayOffset.json and `stats`.

    `_lock` (an RLock) guards `state` and the view file: `step()` holds it for a whole round,
    store puts included, and `persist`, `offset_table`, `delivery_lag_ms` and `backlog` take it
    from other threads. `stats`, `_restored_for` and `_followed` are written only by the service
    thread (`step`; `on_stop` after the thread ended) and read without a lock."""

    name = "schedule"

    def __init__(self, store: "MessageStore", clock: "Clock | None" = None, *,
                 max_timer_pending: int = 100_000) -> None:
        super().__init__()
        self.store = store
        self.clock = clock or store.clock
        self.levels = store.config.delay_levels_ms()
        self.timer_qid = timer_queue_id(self.levels)
        self.max_timer_pending = max_timer_pending
        self.stats = ScheduleStats()
        self.file = JsonConfigFile(StoreLayout(store.root).delay_offset, store.io)
        self._lock = threading.RLock()
        self.state = ScheduleState(self.timer_qid)  # guarded by _lock
        self._restored_for: int | None = None  # store generation the progress was restored for
        self._followed: tuple[int, int] | None = None  # (generation, progress queue end) seen
        self._load()

    # -- offsets file -----------------------------------------------------------------------
    def _load(self) -> None:
        data = self.file.load()
        if data is None:
            return
        try:
            self.state.apply_table(data)
        except (AttributeError, TypeError, ValueError) as e:
            raise CorruptFile(f"{self.file.path}: {e}") from e

    def persist(self) -> bool:
        with self._lock:
            try:
                self.file.persist(self.state.encode())
            except DiskError as e:
                self.stats.persist_failures += 1
                log.error("schedule: cannot persist delay offsets: %s", e)
                self.state.dirty = True
                return False
            self.state.dirty = False
            return True

    def offset_table(self) -> dict[int, int]:
        """{level (1-based; the timestamp queue is len(levels) + 1): next offset}."""
        with self._lock:
            return self.state.levels_table()

    # -- rounds ------------------------------------------------------------------------------
    def wait_interval(self) -> float:
        return 0.1

    def step(self) -> None:
        store = self.store
        if store.config.is_slave:
            self._follow()
            return
        generation = store.generation
        if store.ready_generation != generation:
            return  # becoming master: its log is not complete and dispatched yet
        with self._lock:
            if self._restored_for != generation:
                self._restore()
                self._restored_for = generation
            now = self.clock.now_ms()
            more = False
            for qid in range(len(self.levels)):
                more |= self._step_level(qid, now)
            more |= self._step_timer(now)
            if self.state.dirty:
                self.persist()
        if more:
            self.wakeup()

    def on_stop(self) -> None:
        if self.state.dirty:
            self.persist()

    def _queue(self, qid: int):
        return self.store.cq_store.find(SCHEDULE_TOPIC, qid)

    def _clamped(self, qid: int, cq) -> int:
        off = self.state.offset(qid)
        lo, hi = cq.min_offset(), cq.max_offset()
        if off < lo or off > hi:
            log.warning("schedule: offset %d of level %d outside [%d, %d], corrected",
                        off, qid + 1, lo, hi)
            off = min(max(off, lo), hi)
        self.state.set_offset(qid, off)
        return off

    def _step_level(self, qid: int, now: int) -> bool:
        """Deliver the due prefix of one level queue; True when the round cap cut it short."""
        cq = self._queue(qid)
        if cq is None:
            return False
        off = self._clamped(qid, cq)
        latest_ok = now + self.levels[qid]  # later than this: the clock went backwards
        handled = 0
        batch = _BATCH
        while handled < _MAX_PER_ROUND:
            units = list(cq.iter_units(off, batch))
            due = []
            for index, phy, size, deliver in units:
                if now < deliver <= latest_ok:
                    break
                due.append((index, phy, size))
            if not due:
                return False
            before, off = off, due[-1][0] + 1
            self.state.set_offset(qid, off)  # what the batch's progress record says
            outcome = self._put_batch(qid, [(phy, size) for _, phy, size in due])
            if outcome is not _Outcome.DONE:  # undo: the batch's units are due again
                off = before
                self.state.set_offset(qid, off)
                if outcome is _Outcome.FAILED:
                    return False
                batch = 1  # one message of the batch is refused for good: find it
                continue
            handled += len(due)
            if len(due) < len(units):
                return False  # stopped at a unit not yet due
        return True

    # -- timestamp queue ---------------------------------------------------------------------
    def _step_timer(self, now: int) -> bool:
        qid, state = self.timer_qid, self.state
        cq = self._queue(qid)
        if cq is None:
            return False
        lo, hi, scanned = cq.min_offset(), cq.max_offset(), state.scan
        if state.within(lo, hi):
            log.warning("schedule: timestamp queue truncated to %d (read ahead to %d)", hi,
                        scanned)
        handled = read_total = 0
        more = False
        while True:
            read = self._read_ahead(cq)
            read_total += read
            ok, n = self._deliver_due(now, _MAX_PER_ROUND - handled)
            handled += n
            if not ok:
                break
            if handled >= _MAX_PER_ROUND or read_total >= 16 * _MAX_PER_ROUND:
                more = True
                break
            if read == 0:
                break
        state.skips_done()
        state.set_offset(qid, state.watermark())
        return more

    def _read_ahead(self, cq) -> int:
        """Read up to _BATCH more units into the heap; returns how many indexes were passed."""
        state = self.state
        room = self.max_timer_pending - len(state.pending)
        if room <= 0:
            return 0
        passed = 0
        for index, phy, size, deliver in cq.iter_units(state.scan, min(_BATCH, room)):
            passed += state.read_ahead(index, deliver, phy, size)
        return passed

    def _deliver_due(self, now: int, limit: int) -> tuple[bool, int]:
        state = self.state
        n = 0
        batch = _BATCH
        while state.due(now) and n < limit:
            units, kept, before = state.take_due(now, min(batch, limit - n))
            outcome = self._put_batch(self.timer_qid, [(e[2], e[3]) for e in units])
            if outcome is not _Outcome.DONE:  # undo: the units are pending again
                state.undo(units, kept, before)
                if outcome is _Outcome.FAILED:
                    return False, n
                batch = 1
                continue
            n += len(units)
        return True, n

    # -- one batch --------------------------------------------------------------------------
    def _put_batch(self, qid: int, units: list[tuple[int, int]]) -> "_Outcome":
        """Append the real messages of `units` (commitlog offset, size) and the progress record
        of the current state, which already counts them as delivered, in one batch. DONE: they
        are delivered or dropped for good; FAILED: retry next round; SPLIT: a message of a
        batch of several is refused for good (retry one at a time to find it)."""
        if self.store.generation != self._restored_for:
            return _Outcome.FAILED  # the role flipped (or the log was cut) during this round
        msgs = [m for m in (self._real_message(qid, phy) for phy, _ in units) if m is not None]
        result = self.store.put_messages([*msgs, self._progress_message()],
                                         allow_system_topic=True)
        if result.ok:
            self.stats.delivered += len(msgs)
            return _Outcome.DONE
        if result.status in _PERMANENT_REFUSALS and msgs:
            if len(msgs) > 1:
                return _Outcome.SPLIT
            self._drop(qid, units[0][0], f"{result.status.value}: {result.reason}")
            return self._put_batch(qid, [])  # the progress past it, alone
        self.stats.put_failures += 1
        self.stats.last_failure = f"{result.status.value}: {result.reason}"
        log.warning("schedule: delivery of %d level %d message(s) failed (%s); retrying",
                    len(msgs), qid + 1, self.stats.last_failure)
        return _Outcome.FAILED

    def _real_message(self, qid: int, phy: int) -> Message | None:
        """The message to deliver for the unit at `phy`, or None (dropped for good)."""
        record = self.store.look_message_by_offset(phy)
        if record is None or record.topic != SCHEDULE_TOPIC:
            return self._drop(qid, phy, "record no longer readable")
        try:
            msg = rebuild_real_message(record)
            check_topic(msg.topic, allow_system=False)
        except MessageIllegal as e:
            return self._drop(qid, phy, str(e))
        return msg

    def _progress_message(self) -> Message:
        data = self.state.encode()
        body = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        if len(body) > self.store.config.max_message_size:  # the watermark alone: at least once
            data.pop("timerQueueState", None)
            body = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return Message(PROGRESS_TOPIC, body, 0, {codec.PROPERTY_TAGS: PROGRESS_TAG})

    def _drop(self, qid: int, phy: int, reason: str) -> None:
        self.stats.dropped += 1
        log.error("schedule: dropping level %d message at commitlog offset %d: %s",
                  qid + 1, phy, reason)

    # -- progress in the log -----------------------------------------------------------------
    def newest_progress(self) -> dict[str, Any] | None:
        """The body of the newest progress record reput dispatched (None: there is none, or
        retention deleted it)."""
        store = self.store
        end = store.max_offset_in_queue(PROGRESS_TOPIC, 0)
        if end <= store.min_offset_in_queue(PROGRESS_TOPIC, 0):
            return None
        got = store.get_messages(PROGRESS_TOPIC, 0, end - 1, 1)
        if not got.found:
            return None
        try:
            data = json.loads(bytes(got.messages[0].body))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            log.error("schedule: unreadable progress record at queue offset %d: %s", end - 1, e)
            return None
        return data if isinstance(data, dict) else None

    def _restore(self) -> None:
        """Become the master's delivery state: the newest progress record of the log, else
        what this node had (its delayOffset.json or what it followed), read again from the
        queues (call with the lock)."""
        data = self.newest_progress()
        state = self.state
        try:
            state.apply_table(data if data is not None else state.encode())
        except (AttributeError, TypeError, ValueError) as e:
            log.error("schedule: progress record unusable (%s); keeping the offsets", e)
            state.apply_table(state.encode())
        state.dirty = True
        log.info("schedule: progress restored from %s: %s",
                 "the log" if data is not None else self.file.path, self.offset_table())

    def _follow(self) -> None:
        """A slave: adopt the newest progress record it dispatched and keep the view."""
        store = self.store
        seen = (store.generation, store.max_offset_in_queue(PROGRESS_TOPIC, 0))
        if seen == self._followed:
            return
        self._followed = seen
        data = self.newest_progress()
        if data is None:
            return
        with self._lock:
            try:
                self.state.apply_table(data)
            except (AttributeError, TypeError, ValueError) as e:
                log.error("schedule: progress record unusable (%s)", e)
                return
            self.persist()

    # -- observability -----------------------------------------------------------------------
    def delivery_lag_ms(self) -> int:
        """How long the most overdue undelivered message has been due (0 when none is)."""
        with self._lock:
            now = self.clock.now_ms()
            lag = 0
            for qid in range(len(self.levels)):
                cq = self._queue(qid)
                if cq is None:
                    continue
                for _, _, _, deliver in cq.iter_units(self.state.offset(qid), 1):
                    lag = max(lag, now - deliver)
            earliest = self.state.earliest_ms()
            if earliest is not None:
                lag = max(lag, now - earliest)
            return max(0, lag)

    def backlog(self) -> dict[int, int]:
        """{level: units not yet delivered} (the timestamp queue counts its unread units plus
        the pending ones read ahead)."""
        with self._lock:
            out = {}
            for qid in range(len(self.levels) + 1):
                cq = self._queue(qid)
                if cq is None:
                    continue
                if qid == self.timer_qid:
                    out[qid + 1] = (max(0, cq.max_offset() - self.state.scan)
                                    + len(self.state.pending))
                else:
                    out[qid + 1] = max(0, cq.max_offset() - self.state.offset(qid))
            return out


def attach(store: "MessageStore", clock: "Clock | None" = None, **kwargs) -> ScheduleService:
    """Create the schedule service and register it with the store, which starts and stops it
    with its other services (attach before store.start())."""
    service = ScheduleService(store, clock, **kwargs)
    store.schedule = service
    return service

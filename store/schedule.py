"""Delay-level and deliver-at messages: RocketMQ's ScheduleMessageService.

Put side (`to_schedule`, `put_scheduled`). A message is rewritten into the schedule topic
SCHEDULE_TOPIC_XXXX when it is a normal or committed-transaction message (prepared and rollback
transaction messages are never delayed) and

- has property DELAY = level > 0 (levels 1..N of `message_delay_level`, N = 18 by default; a
  level above N is clamped to N like RocketMQ). It goes to schedule queue `level - 1`; any
  TIMER_* property is dropped (RocketMQ: a delay level wins over a timer). Or
- has TIMER_DELAY_SEC, TIMER_DELAY_MS (relative to `now_ms`) or TIMER_DELIVER_MS (absolute
  epoch ms), checked in that order (RocketMQ HookUtils.transformTimerMessage). The delivery time
  is written as TIMER_DELIVER_MS (the relative properties are dropped) and the message goes to
  the dedicated "timestamp queue" of the schedule topic, queue id N (= 18 by default, one past
  the level queues; its offset is stored as level N + 1 = 19). A delivery time not after
  `now_ms` means "deliver now": the message comes back unchanged. One more than
  `timer_max_delay_sec` ahead is rejected with MessageIllegal("delivery time", ...).

The original topic and queue id are kept in REAL_TOPIC / REAL_QID. The dispatcher then writes
the delivery time as the consume-queue tagsCode (store time + level delay, or TIMER_DELIVER_MS),
so the service below finds due messages from the consume queue alone.

Delivery side (`ScheduleService`, a Service; `attach(store)` registers it with the store).
Each `step()`, for every schedule queue, reads units from the queue's next offset and, for each
due one, loads the record, rebuilds the real message (topic REAL_TOPIC, queue REAL_QID; DELAY,
TIMER_*, REAL_*, WAIT and the property-CRC tail removed; everything else, including UNIQ_KEY,
KEYS, TAGS, body, flag, sysFlag, born timestamp/host and reconsume times, unchanged) and puts
it with `store.put_messages(..., allow_system_topic=False)`.

- At least once, never skipped: the offset moves past a unit only once its put answered PUT_OK.
  Any other answer (store not writable, flush failure or timeout, ...) stops that queue for this
  round; the same unit is retried next round. A flush timeout may therefore deliver twice.
  The WAIT property is removed, so under SYNC_FLUSH delivery waits for the flush: a persisted
  offset never runs ahead of a delivery a crash could take away.
- Dropped (logged, counted in `stats.dropped`), like RocketMQ's "messageTimeup execute error,
  drop it": a record that can no longer be read (its commitlog file was deleted), one without a
  usable REAL_TOPIC / REAL_QID, and one the store refuses for good (MESSAGE_ILLEGAL,
  PROPERTIES_SIZE_EXCEEDED, e.g. REAL_TOPIC is a system topic). Retrying those would block the
  queue forever.
- Level queues are in delivery order (same delay, store-time order), so a round stops at the
  first unit not yet due. A tagsCode more than the level's delay ahead of now (the clock went
  backwards, or the level was shortened) counts as due (RocketMQ correctDeliverTimestamp).
- The timestamp queue is not in delivery order. Units are read ahead into an in-memory heap
  (delivery time, queue index), at most `max_timer_pending` of them, and due ones are delivered
  earliest first, so a message due in 3 days never holds back one due in 3 seconds (unless the
  heap is full: then reading ahead pauses until some are delivered). Its persisted offset is the
  lowest queue index not yet delivered (the watermark). Units above the watermark that were
  already delivered are remembered in `timerQueueState` of the offsets file (the read-ahead
  offset and the still pending indexes below it) when at most `TIMER_STATE_PERSIST_MAX` are
  pending; with more, only the watermark is stored and a restart redelivers what was delivered
  above it (at least once).
- Offsets are persisted, when a round changed them, to `<root>/config/delayOffset.json` in
  RocketMQ's format {"offsetTable": {"<level>": nextOffset}} (level = queue id + 1), plus our
  "timerQueueState" key (ignored by RocketMQ). They are loaded at construction; each round
  raises an offset below its queue's min offset to the min (files deleted by retention) and
  lowers one above its max offset to the max (a queue truncated by recovery), RocketMQ's
  correctDelayOffset. A failed persist is logged and retried next round (a restart may then
  redeliver: at least once).
- A store whose broker_role is SLAVE delivers nothing (the master's deliveries replicate).
- If `message_delay_level` changes the number of levels, the timestamp queue id moves with it;
  change the level count only with an empty timestamp queue.
"""
from __future__ import annotations

import dataclasses
import heapq
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from . import codec
from .codec import Message, MessageRecord, SysFlag
from .dispatch import SCHEDULE_TOPIC
from .errors import CorruptFile, DiskError, MessageIllegal
from .json_config import JsonConfigFile
from .layout import StoreLayout
from .put_result import PutResult, PutStatus
from .service import Service
from .validation import check_topic

if TYPE_CHECKING:
    from .clock import Clock
    from .message_store import MessageStore

log = logging.getLogger(__name__)

PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_STATE_PERSIST_MAX = 1024
_BATCH = 64
_MAX_PER_ROUND = 1024  # units handled per queue per step; more -> wakeup() for another round
_TIMER_PROPS = (codec.PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)
# Removed from a message when it is delivered to its real topic.
_SCHEDULE_PROPS = (codec.PROPERTY_DELAY_TIME_LEVEL, *_TIMER_PROPS, codec.PROPERTY_REAL_TOPIC,
                   codec.PROPERTY_REAL_QUEUE_ID, codec.PROPERTY_WAIT_STORE_MSG_OK, codec.PROP_CRC_NAME)
_PERMANENT_REFUSALS = (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED)


# -- put side ---------------------------------------------------------------------------------
def timer_queue_id(levels: Sequence[int]) -> int:
    """The schedule queue of deliver-at messages: one past the level queues."""
    return len(levels)


def _delay_level(props: dict[str, str]) -> int:
    raw = props.get(codec.PROPERTY_DELAY_TIME_LEVEL)
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise MessageIllegal("delay level", f"{raw!r} is not an integer") from None


def _deliver_ms(props: dict[str, str], now_ms: int) -> int | None:
    for name, base, scale in ((PROPERTY_TIMER_DELAY_SEC, now_ms, 1000),
                              (PROPERTY_TIMER_DELAY_MS, now_ms, 1),
                              (codec.PROPERTY_TIMER_DELIVER_MS, 0, 1)):
        raw = props.get(name)
        if raw is None:
            continue
        try:
            return base + int(raw) * scale
        except ValueError:
            raise MessageIllegal("delivery time", f"{name}={raw!r} is not an integer") from None
    return None


def to_schedule(msg: Message, levels: Sequence[int], now_ms: int, max_delay_sec: int) -> Message:
    """The message to store for `msg`: a schedule-topic copy when it asks for a delay level or a
    future delivery time, else `msg` itself (see the module doc). Never mutates `msg`. Raises
    MessageIllegal for an unparsable DELAY / TIMER_* value or a delivery time more than
    `max_delay_sec` ahead of `now_ms`."""
    if msg.topic == SCHEDULE_TOPIC:
        return msg
    tran = msg.sys_flag & SysFlag.TRANSACTION_MASK
    if tran not in (SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE):
        return msg
    props = msg.properties
    level = _delay_level(props)
    if level > 0:
        if not levels:
            raise MessageIllegal("delay level", "no delay levels configured")
        level = min(level, len(levels))
        new = {k: v for k, v in props.items() if k not in _TIMER_PROPS}
        new[codec.PROPERTY_DELAY_TIME_LEVEL] = str(level)
        queue_id = level - 1
    else:
        deliver = _deliver_ms(props, now_ms)
        if deliver is None or deliver <= now_ms:
            return msg
        if deliver - now_ms > max_delay_sec * 1000:
            raise MessageIllegal("delivery time",
                                 f"{deliver} is {deliver - now_ms} ms ahead, more than the "
                                 f"maximum of {max_delay_sec} s")
        new = {k: v for k, v in props.items() if k not in _TIMER_PROPS}
        new[codec.PROPERTY_TIMER_DELIVER_MS] = str(deliver)
        queue_id = timer_queue_id(levels)
    new[codec.PROPERTY_REAL_TOPIC] = msg.topic
    new[codec.PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    return dataclasses.replace(msg, topic=SCHEDULE_TOPIC, queue_id=queue_id, properties=new)


def put_scheduled(store: "MessageStore", msgs: Sequence[Message]) -> PutResult:
    """Producer-facing put: refuses system topics, applies `to_schedule` with the store's
    levels, clock and timer_max_delay_sec, then puts the batch (the schedule topic allowed)."""
    levels = store.config.delay_levels_ms()
    now = store.clock.now_ms()
    try:
        out = []
        for m in msgs:
            check_topic(m.topic, allow_system=False)
            out.append(to_schedule(m, levels, now, store.config.timer_max_delay_sec))
    except MessageIllegal as e:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, reason=str(e))
    return store.put_messages(out, allow_system_topic=True)


def rebuild_real_message(record: MessageRecord) -> Message:
    """The message to deliver for a schedule-topic record (RocketMQ messageTimeup). Raises
    MessageIllegal when REAL_TOPIC / REAL_QID are missing or unusable."""
    props = record.properties
    topic = props.get(codec.PROPERTY_REAL_TOPIC)
    if not topic:
        raise MessageIllegal("real topic", "REAL_TOPIC missing")
    raw_qid = props.get(codec.PROPERTY_REAL_QUEUE_ID)
    try:
        queue_id = int(raw_qid)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise MessageIllegal("real queue id", f"REAL_QID {raw_qid!r} is not an integer") from None
    if queue_id < 0:
        raise MessageIllegal("real queue id", f"REAL_QID {queue_id} is negative")
    return Message(topic, record.body, queue_id,
                   {k: v for k, v in props.items() if k not in _SCHEDULE_PROPS},
                   flag=record.flag, sys_flag=record.sys_flag,
                   born_timestamp=record.born_timestamp, born_host=record.born_host,
                   store_host=record.store_host, reconsume_times=record.reconsume_times)


# -- delivery side --------------------------------------------------------------------------
@dataclass
class ScheduleStats:
    delivered: int = 0
    dropped: int = 0
    put_failures: int = 0
    last_failure: str = ""
    persist_failures: int = 0


class ScheduleService(Service):
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
        self._offsets: dict[int, int] = {}  # queue id -> next offset (timer queue: watermark)
        self._foreign: dict[str, Any] = {}  # offsetTable keys that are not ours, kept as found
        # timestamp queue
        self._scan = 0  # next index to read ahead
        self._heap: list[tuple[int, int, int, int]] = []  # (deliver_ms, index, phy, size)
        self._pending: set[int] = set()
        self._index_heap: list[int] = []  # pending indexes, lazily cleaned
        self._skip_below = 0  # indexes in [watermark, _skip_below) not in _keep were delivered
        self._keep: set[int] = set()
        self._dirty = False
        self._load()

    # -- offsets file -----------------------------------------------------------------------
    def _load(self) -> None:
        data = self.file.load()
        if data is None:
            return
        try:
            table = data.get("offsetTable", {})
            if not isinstance(table, dict):
                raise ValueError("offsetTable is not an object")
            for key, value in table.items():
                level = int(key)
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ValueError(f"offset of level {key} is {value!r}")
                if 1 <= level <= self.timer_qid + 1:
                    self._offsets[level - 1] = value
                else:
                    self._foreign[key] = value
            state = data.get("timerQueueState")
            watermark = self._offsets.get(self.timer_qid, 0)
            if isinstance(state, dict):
                scan = int(state.get("scanOffset", 0))
                keep = {int(i) for i in state.get("pending", [])}
                if scan > watermark:
                    self._skip_below = scan
                    self._keep = {i for i in keep if watermark <= i < scan}
        except (AttributeError, TypeError, ValueError) as e:
            raise CorruptFile(f"{self.file.path}: {e}") from e
        self._scan = self._offsets.get(self.timer_qid, 0)

    def _encode(self) -> dict[str, Any]:
        table: dict[str, Any] = dict(self._foreign)
        for qid, off in self._offsets.items():
            table[str(qid + 1)] = off
        data: dict[str, Any] = {"offsetTable": table}
        watermark = self._offsets.get(self.timer_qid, 0)
        pending = sorted(self._pending | {i for i in self._keep if i >= watermark})
        horizon = max(self._scan, self._skip_below)
        if horizon > watermark and len(pending) <= TIMER_STATE_PERSIST_MAX:
            data["timerQueueState"] = {"scanOffset": horizon, "pending": pending}
        return data

    def persist(self) -> bool:
        with self._lock:
            try:
                self.file.persist(self._encode())
            except DiskError as e:
                self.stats.persist_failures += 1
                log.error("schedule: cannot persist delay offsets: %s", e)
                self._dirty = True
                return False
            self._dirty = False
            return True

    def offset_table(self) -> dict[int, int]:
        """{level (1-based; the timestamp queue is len(levels) + 1): next offset}."""
        with self._lock:
            return {qid + 1: off for qid, off in sorted(self._offsets.items())}

    # -- rounds ------------------------------------------------------------------------------
    def wait_interval(self) -> float:
        return 0.1

    def step(self) -> None:
        if self.store.config.is_slave:
            return
        with self._lock:
            now = self.clock.now_ms()
            more = False
            for qid in range(len(self.levels)):
                more |= self._step_level(qid, now)
            more |= self._step_timer(now)
            if self._dirty:
                self.persist()
        if more:
            self.wakeup()

    def on_stop(self) -> None:
        if self._dirty:
            self.persist()

    def _queue(self, qid: int):
        return self.store.cq_store.find(SCHEDULE_TOPIC, qid)

    def _set_offset(self, qid: int, off: int) -> None:
        if self._offsets.get(qid) != off:
            self._offsets[qid] = off
            self._dirty = True

    def _clamped(self, qid: int, cq) -> int:
        off = self._offsets.get(qid, 0)
        lo, hi = cq.min_offset(), cq.max_offset()
        if off < lo or off > hi:
            log.warning("schedule: offset %d of level %d outside [%d, %d], corrected",
                        off, qid + 1, lo, hi)
            off = min(max(off, lo), hi)
        self._set_offset(qid, off)
        return off

    def _step_level(self, qid: int, now: int) -> bool:
        """Deliver the due prefix of one level queue; True when the round cap cut it short."""
        cq = self._queue(qid)
        if cq is None:
            return False
        off = self._clamped(qid, cq)
        latest_ok = now + self.levels[qid]  # later than this: the clock went backwards
        handled = 0
        while handled < _MAX_PER_ROUND:
            units = list(cq.iter_units(off, _BATCH))
            if not units:
                return False
            for index, phy, size, deliver in units:
                if now < deliver <= latest_ok:
                    return False
                if not self._deliver(qid, phy, size):
                    return False
                off = index + 1
                self._set_offset(qid, off)
                handled += 1
        return True

    # -- timestamp queue ---------------------------------------------------------------------
    def _watermark(self) -> int:
        while self._index_heap and self._index_heap[0] not in self._pending:
            heapq.heappop(self._index_heap)
        return self._index_heap[0] if self._index_heap else self._scan

    def _step_timer(self, now: int) -> bool:
        qid = self.timer_qid
        cq = self._queue(qid)
        if cq is None:
            return False
        lo, hi = cq.min_offset(), cq.max_offset()
        if self._scan > hi:  # truncated by recovery: forget what no longer exists
            log.warning("schedule: timestamp queue truncated to %d (read ahead to %d)", hi, self._scan)
            self._scan = hi
            self._heap = [e for e in self._heap if e[1] < hi]
            heapq.heapify(self._heap)
            self._pending = {i for i in self._pending if i < hi}
            self._skip_below = min(self._skip_below, hi)
        if self._scan < lo:
            self._scan = lo
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
        if self._skip_below <= self._scan and self._skip_below:
            self._skip_below, self._keep = 0, set()
            self._dirty = True
        self._set_offset(qid, self._watermark())
        return more

    def _read_ahead(self, cq) -> int:
        """Push up to _BATCH more units into the heap; returns how many indexes were passed."""
        room = self.max_timer_pending - len(self._pending)
        if room <= 0:
            return 0
        passed = 0
        for index, phy, size, deliver in cq.iter_units(self._scan, min(_BATCH, room)):
            passed += max(1, index + 1 - self._scan)
            self._scan = index + 1
            self._dirty = True
            if index < self._skip_below and index not in self._keep:
                continue  # delivered before the restart
            heapq.heappush(self._heap, (deliver, index, phy, size))
            heapq.heappush(self._index_heap, index)
            self._pending.add(index)
        return passed

    def _deliver_due(self, now: int, limit: int) -> tuple[bool, int]:
        n = 0
        while self._heap and self._heap[0][0] <= now and n < limit:
            deliver, index, phy, size = self._heap[0]
            if not self._deliver(self.timer_qid, phy, size):
                return False, n
            heapq.heappop(self._heap)
            self._pending.discard(index)
            self._keep.discard(index)
            self._dirty = True
            n += 1
        return True, n

    # -- one message -------------------------------------------------------------------------
    def _deliver(self, qid: int, phy: int, size: int) -> bool:
        """Put the real message of the unit. True when the offset may move past it (delivered
        or dropped for good), False to retry next round."""
        record = self.store.look_message_by_offset(phy)
        if record is None or record.topic != SCHEDULE_TOPIC:
            return self._drop(qid, phy, "record no longer readable")
        try:
            msg = rebuild_real_message(record)
        except MessageIllegal as e:
            return self._drop(qid, phy, str(e))
        result = self.store.put_messages([msg], allow_system_topic=False)
        if result.ok:
            self.stats.delivered += 1
            return True
        if result.status in _PERMANENT_REFUSALS:
            return self._drop(qid, phy, f"{result.status.value}: {result.reason}")
        self.stats.put_failures += 1
        self.stats.last_failure = f"{result.status.value}: {result.reason}"
        log.warning("schedule: delivery of level %d message at %d failed (%s); retrying",
                    qid + 1, phy, self.stats.last_failure)
        return False

    def _drop(self, qid: int, phy: int, reason: str) -> bool:
        self.stats.dropped += 1
        log.error("schedule: dropping level %d message at commitlog offset %d: %s",
                  qid + 1, phy, reason)
        return True

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
                for _, _, _, deliver in cq.iter_units(self._offsets.get(qid, 0), 1):
                    lag = max(lag, now - deliver)
            if self._heap:
                lag = max(lag, now - self._heap[0][0])
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
                    out[qid + 1] = max(0, cq.max_offset() - self._scan) + len(self._pending)
                else:
                    out[qid + 1] = max(0, cq.max_offset() - self._offsets.get(qid, 0))
            return out


def attach(store: "MessageStore", clock: "Clock | None" = None, **kwargs) -> ScheduleService:
    """Create the schedule service and register it with the store, which starts and stops it
    with its other services (attach before store.start())."""
    service = ScheduleService(store, clock, **kwargs)
    store.extra_services.append(service)
    return service

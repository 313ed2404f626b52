"""What every consumer group has consumed: the pure state machine behind ReceiveMessage, Ack,
ChangeInvisibleDuration, UpdateOffset and the DLQ. No I/O: the consumer service's replicated table
(cluster/replicated/) appends each event to the commitlog (records.py) and applies it here, so
replaying the records in log order rebuilds exactly this state on any replica.

Per (group, topic, queue) a `QueueState` holds
    cursor    the next queue offset never handed out (new messages start here)
    inflight  queue offset -> Inflight(attempt, invisible_until_ms, handle): delivered, not acked
Everything below the cursor that is not in flight is done (acked, filtered out, or sent to the
DLQ), so the committed offset, where a consumer resumes, is min(inflight offsets, cursor).

Events (the `kind` of each record):
    group      a group's config (fifo, retry_max_times, consume_enable) or its deletion
    pop        offsets handed out with their attempt, receipt handle and message group, and one
               invisibility deadline;
               moves the cursor past them (and past `skip_to`, what the tag filter skipped)
    ack        an offset done; only the delivery whose handle matches counts (a stale handle
               after a redelivery is refused)
    acks       the offsets of one AckMessage request done at once: `items` of [queue, offset,
               handle], each applied like an `ack` (one record per request instead of one per
               entry; `ack` records of earlier versions still replay)
    change     a delivery's invisibility moved (new deadline, new handle)
    offset     the committed offset set by UpdateOffset or an offset reset: the cursor moves
               there and nothing stays in flight
    snapshot   the whole state, so replay can start at the newest snapshot
Handles are unique and increasing (`next_handle`), also across failovers, because the counter
is rebuilt from the records.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator

DEFAULT_RETRY_MAX_TIMES = 16  # RocketMQ's subscription group default (17 deliveries)


@dataclass(frozen=True)
class GroupInfo:
    """A consumer group's config: FIFO or not, how often a message is retried before the
    DLQ, and whether the group may consume."""

    name: str
    fifo: bool = False
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES
    consume_enable: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.retry_max_times <= 1000:
            raise ValueError(f"retry_max_times {self.retry_max_times} is not in [0, 1000]")

    @property
    def max_delivery_attempts(self) -> int:
        return self.retry_max_times + 1


@dataclass(slots=True)
class Inflight:
    """One delivery not acked yet: its attempt, when it becomes visible again, its receipt
    handle and (FIFO) its message group."""

    attempt: int
    invisible_until: int
    handle: int
    message_group: str = ""  # FIFO: a group with a message in flight is blocked in its queue


@dataclass(slots=True)
class QueueState:
    """One (group, topic, queue)'s progress: the cursor (next offset never handed out) and the
    deliveries in flight; `committed` is where a consumer resumes."""

    cursor: int
    inflight: dict[int, Inflight] = field(default_factory=dict)

    @property
    def committed(self) -> int:
        return min(self.cursor, min(self.inflight)) if self.inflight else self.cursor


QueueKey = tuple[str, str, int]  # group, topic, queue id


class ConsumerState:
    """The consumer groups of one node as a pure state machine (the module docstring): owns
    every group's config, every (group, topic, queue)'s QueueState, the receipt-handle
    counter, and the counters that drive snapshots and views (`version`,
    `events_since_snapshot`, `group_changes`).

    Not thread-safe, and no I/O: it is the state of a ReplicatedTable, which applies events
    to it under the table's lock; the consumer service reads it under that lock too, except
    for quick checks of whether a group exists."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupInfo] = {}
        self.queues: dict[QueueKey, QueueState] = {}
        self.next_handle = 1
        self.group_changes = 0  # group events since the table began (subscriptionGroup.json)
        self.events_since_snapshot = 0
        self.version = 0  # events applied: tells writers of derived files that something changed

    # -- reads --------------------------------------------------------------------------------
    def is_empty(self) -> bool:
        return not self.groups and not self.queues

    def queue(self, group: str, topic: str, queue_id: int) -> QueueState | None:
        return self.queues.get((group, topic, queue_id))

    def queues_of(self, group: str) -> Iterator[tuple[QueueKey, QueueState]]:
        for key, q in self.queues.items():
            if key[0] == group:
                yield key, q

    # -- events -------------------------------------------------------------------------------
    def apply(self, event: dict[str, Any]) -> None:
        """Apply one event (a decoded record). Unknown kinds are an error: a replica must never
        silently skip state it does not understand."""
        kind = event["kind"]
        handler = _HANDLERS.get(kind)
        if handler is None:
            raise ValueError(f"unknown consumer state event {kind!r}")
        handler(self, event)
        self.version += 1
        self.events_since_snapshot = 0 if kind == "snapshot" else self.events_since_snapshot + 1

    def _group(self, e: dict[str, Any]) -> None:
        self.group_changes += 1
        self._set_group(e)

    def _set_group(self, e: dict[str, Any]) -> None:
        name = e["group"]
        if e.get("deleted"):
            self.groups.pop(name, None)
            for key in [k for k in self.queues if k[0] == name]:
                del self.queues[key]
            return
        self.groups[name] = GroupInfo(name, bool(e.get("fifo", False)),
                                      int(e.get("retry_max_times", DEFAULT_RETRY_MAX_TIMES)),
                                      bool(e.get("consume_enable", True)))

    def _slot(self, e: dict[str, Any]) -> QueueState:
        key = (e["group"], e["topic"], int(e["queue"]))
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = QueueState(int(e.get("base", 0)))
        return q

    def _pop(self, e: dict[str, Any]) -> None:
        q = self._slot(e)
        until = int(e["until"])
        for offset, attempt, handle, message_group in e["items"]:
            q.inflight[offset] = Inflight(attempt, until, handle, message_group)
            q.cursor = max(q.cursor, offset + 1)
            self.next_handle = max(self.next_handle, handle + 1)
        q.cursor = max(q.cursor, int(e.get("skip_to", 0)))

    def _ack(self, e: dict[str, Any]) -> None:
        q = self.queues.get((e["group"], e["topic"], int(e["queue"])))
        if q is None:
            return
        current = q.inflight.get(int(e["offset"]))
        if current is not None and current.handle == int(e["handle"]):
            del q.inflight[int(e["offset"])]

    def _acks(self, e: dict[str, Any]) -> None:
        group, topic = e["group"], e["topic"]
        for queue, offset, handle in e["items"]:
            q = self.queues.get((group, topic, int(queue)))
            current = q.inflight.get(int(offset)) if q is not None else None
            if current is not None and current.handle == int(handle):
                del q.inflight[int(offset)]

    def _change(self, e: dict[str, Any]) -> None:
        q = self.queues.get((e["group"], e["topic"], int(e["queue"])))
        if q is None:
            return
        current = q.inflight.get(int(e["offset"]))
        if current is not None and current.handle == int(e["handle"]):
            q.inflight[int(e["offset"])] = Inflight(current.attempt, int(e["until"]),
                                                     int(e["new_handle"]), current.message_group)
        self.next_handle = max(self.next_handle, int(e["new_handle"]) + 1)

    def _offset(self, e: dict[str, Any]) -> None:
        key = (e["group"], e["topic"], int(e["queue"]))
        self.queues[key] = QueueState(int(e["offset"]))

    def _snapshot(self, e: dict[str, Any]) -> None:
        self.groups = {}
        self.queues = {}
        for g in e["groups"]:
            self._set_group(g)
        self.group_changes = int(e.get("group_changes", 0))  # absent in older snapshots
        for group, topic, queue, cursor, inflight in e["queues"]:
            self.queues[(group, topic, queue)] = QueueState(
                cursor, {o: Inflight(a, u, h, g) for o, a, u, h, g in inflight})
        self.next_handle = max(self.next_handle, int(e["next_handle"]))

    # -- snapshot -----------------------------------------------------------------------------
    def snapshot_event(self) -> dict[str, Any]:
        return {
            "kind": "snapshot",
            "groups": [{"kind": "group", "group": g.name, "fifo": g.fifo,
                        "retry_max_times": g.retry_max_times, "consume_enable": g.consume_enable}
                       for g in self.groups.values()],
            "queues": [[k[0], k[1], k[2], q.cursor,
                        [[o, i.attempt, i.invisible_until, i.handle, i.message_group]
                         for o, i in sorted(q.inflight.items())]]
                       for k, q in self.queues.items()],
            "next_handle": self.next_handle,
            "group_changes": self.group_changes,
        }

    def offset_table(self) -> dict[str, Any]:
        """Committed offsets in RocketMQ's config/consumerOffset.json shape
        ({"offsetTable": {"topic@group": {"queueId": offset}}}), for RocketMQ tooling and the
        audit; the commitlog records stay the source of truth."""
        table: dict[str, dict[str, int]] = {}
        for (group, topic, queue_id), q in sorted(self.queues.items()):
            table.setdefault(f"{topic}@{group}", {})[str(queue_id)] = q.committed
        return {"offsetTable": table}

    def subscription_group_table(self) -> dict[str, Any]:
        """Group configs in RocketMQ's config/subscriptionGroup.json shape (SubscriptionGroupConfig
        with RocketMQ's defaults for what this broker does not use; fifo is
        consumeMessageOrderly); dataVersion's counter counts group events (snapshots carry it),
        its timestamp is 0 (group events carry no time)."""
        table = {}
        for name, g in sorted(self.groups.items()):
            table[name] = {
                "groupName": name, "consumeEnable": g.consume_enable,
                "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
                "consumeMessageOrderly": g.fifo, "retryQueueNums": 1,
                "retryMaxTimes": g.retry_max_times, "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True,
                "groupSysFlag": 0, "consumeTimeoutMinute": 15, "subscriptionDataSet": [],
                "attributes": {},
            }
        return {"subscriptionGroupTable": table,
                "dataVersion": {"counter": self.group_changes, "timestamp": 0}}

    def group_event(self, info: GroupInfo) -> dict[str, Any]:
        return {"kind": "group", **{k: v for k, v in dataclasses.asdict(info).items()
                                    if k != "name"}, "group": info.name}


_HANDLERS = {
    "group": ConsumerState._group,
    "pop": ConsumerState._pop,
    "ack": ConsumerState._ack,
    "acks": ConsumerState._acks,
    "change": ConsumerState._change,
    "offset": ConsumerState._offset,
    "snapshot": ConsumerState._snapshot,
}

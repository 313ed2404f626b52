"""The consumer state of a master: one lock, the state machine, and its records in the commitlog.

Every change is an event (state.py) that is appended to the commitlog (records.py) and then
applied in memory, both under `lock`, so the log order is the memory order and a replay gives
the same state. Waiting for the flush and replication policy happens after the lock is released
(`commit` returns what to wait for), so one slow replication round does not serialize every ack.

The state lives on the master. It is loaded lazily by replaying the state topic the first time
a call needs it in a master role (`ensure_loaded`), so a slave promoted by a failover resumes
from the acks the old master replicated. A slave keeps no state: the messaging service forwards
consumer calls to its master.

The snapshotter's step also writes the committed offsets to `config/consumerOffset.json`
(RocketMQ's format) when they changed, for RocketMQ tooling and the audit.

`Snapshotter` writes a snapshot event every SNAPSHOT_EVERY events, and every
SNAPSHOT_INTERVAL while there is any state (also without new events), so replay stays short and
retention (which deletes files older than fileReservedTime, 72 h) never deletes the newest
snapshot.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from proto.apache.rocketmq.v2 import definition_pb2 as d
from store.codec import Message
from store.errors import StoreError
from store.get_result import GetStatus
from store.json_config import JsonConfigFile
from store.layout import StoreLayout
from store.put_result import PutResult, PutStatus
from store.service import Service

from cluster.messaging.convert import V2Error, put_status_code, put_status_message

from .records import STATE_TOPIC, StateRecordError, from_body, to_message
from .state import ConsumerState, GroupInfo

if TYPE_CHECKING:
    from cluster.messaging.route import TopicRegistry
    from cluster.node import Node

log = logging.getLogger(__name__)
SNAPSHOT_EVERY = 1000
SNAPSHOT_INTERVAL_MS = 3600_000


@dataclass(frozen=True)
class QueueProgress:
    topic: str
    queue_id: int
    committed_offset: int
    max_offset: int
    lag: int
    inflight: int


@dataclass
class Pending:
    """An appended change still to be waited for (outside the lock)."""
    messages: Sequence[Message]
    result: PutResult


class ConsumerService:
    def __init__(self, node: "Node", topics: "TopicRegistry") -> None:
        self.node = node
        self.topics = topics
        self.lock = threading.Lock()
        self.state = ConsumerState()
        self._loaded_for: object | None = None
        self._last_snapshot_ms = node.clock.now_ms()
        self._persisted_version = -1
        self.offset_file = JsonConfigFile(StoreLayout(
            node.config.store.store_path_root_dir).consumer_offset)
        self.snapshotter = Snapshotter(self)

    # -- loading ------------------------------------------------------------------------------
    def master(self):
        master = self.node.master
        if master is None:
            raise V2Error(d.INTERNAL_SERVER_ERROR,
                          f"{self.node.config.node_id} is not the master: consumer state lives "
                          f"on the master ({self.node.master_address or 'unknown'})")
        return master

    def ensure_loaded(self):
        """The current master role, with the state replayed for it. Call without the lock."""
        master = self.master()
        if self._loaded_for is not master:
            with self.lock:
                if self._loaded_for is not master:
                    self.state = self.replay()
                    self._loaded_for = master
        return master

    def replay(self) -> ConsumerState:
        store = self.node.store
        state = ConsumerState()
        offset = store.min_offset_in_queue(STATE_TOPIC, 0)
        applied = 0
        while True:
            result = store.get_messages(STATE_TOPIC, 0, offset, 256)
            if result.status is not GetStatus.FOUND:
                break
            for record in result.messages:
                try:
                    state.apply(from_body(record.body, f"at queue offset {record.queue_offset}"))
                except (StateRecordError, KeyError, TypeError, ValueError) as e:
                    raise StateRecordError(f"cannot replay the consumer state: {e}") from e
                applied += 1
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
        log.info("consumer state replayed: %d records, %d groups, %d queues", applied,
                 len(state.groups), len(state.queues))
        return state

    # -- changing -----------------------------------------------------------------------------
    def commit(self, master, events: list[dict[str, Any]],
               extra: Sequence[Message] = ()) -> Pending:
        """Append `extra` messages and the events' records as one batch, then apply the events.
        Call with the lock held. Nothing is applied when the append is refused (V2Error)."""
        messages = [*extra, *(to_message(e) for e in events)]
        result = master.append(messages, allow_system_topic=True)
        if result.status is not PutStatus.PUT_OK:
            raise V2Error(put_status_code(result), put_status_message(result))
        for event in events:
            self.state.apply(event)
        return Pending(messages, result)

    def wait(self, master, pending: Pending) -> d.Status:
        """Wait (without the lock) until the change holds under the flush/replication policy."""
        result = master.wait_durable(pending.messages, pending.result)
        if result.status is PutStatus.PUT_OK:
            return d.Status(code=d.OK, message="OK")
        return d.Status(code=put_status_code(result), message=put_status_message(result))

    def change(self, events: list[dict[str, Any]]) -> d.Status:
        master = self.ensure_loaded()
        with self.lock:
            pending = self.commit(master, events)
        return self.wait(master, pending)

    # -- groups -------------------------------------------------------------------------------
    def group(self, name: str, *, create: bool = True) -> GroupInfo:
        """A group's config; unknown groups are created with RocketMQ's defaults
        (autoCreateSubscriptionGroup)."""
        info = self.state.groups.get(name)
        if info is not None or not create:
            if info is None:
                raise V2Error(d.CONSUMER_GROUP_NOT_FOUND, f"consumer group {name} does not exist")
            return info
        self.upsert_group(name)
        return self.state.groups[name]

    def list_groups(self) -> list[GroupInfo]:
        self.ensure_loaded()
        return sorted(self.state.groups.values(), key=lambda g: g.name)

    def upsert_group(self, name: str, *, fifo: bool | None = None,
                     retry_max_times: int | None = None,
                     consume_enable: bool | None = None) -> GroupInfo:
        from cluster.messaging.convert import check_group_resource
        check_group_resource(d.Resource(name=name))
        if not name:
            raise V2Error(d.ILLEGAL_CONSUMER_GROUP, "the consumer group name is empty")
        self.ensure_loaded()
        old = self.state.groups.get(name) or GroupInfo(name)
        try:
            info = GroupInfo(name, old.fifo if fifo is None else fifo,
                             old.retry_max_times if retry_max_times is None else retry_max_times,
                             old.consume_enable if consume_enable is None else consume_enable)
        except ValueError as e:
            raise V2Error(d.BAD_REQUEST, str(e)) from None
        if info != self.state.groups.get(name):
            status = self.change([self.state.group_event(info)])
            if status.code != d.OK:
                raise V2Error(status.code, status.message)
        return info

    def delete_group(self, name: str) -> bool:
        self.ensure_loaded()
        if name not in self.state.groups and not any(True for _ in self.state.queues_of(name)):
            return False
        status = self.change([{"kind": "group", "group": name, "deleted": True}])
        if status.code != d.OK:
            raise V2Error(status.code, status.message)
        return True

    # -- progress and offsets -----------------------------------------------------------------
    def progress(self, group: str) -> list[QueueProgress]:
        """Every readable queue of every topic the group consumed from; a queue it never read
        counts from its min offset (where a new group starts)."""
        self.ensure_loaded()
        if group not in self.state.groups:
            raise V2Error(d.CONSUMER_GROUP_NOT_FOUND, f"consumer group {group} does not exist")
        store = self.node.store
        with self.lock:
            known = {(k[1], k[2]): (q.committed, len(q.inflight))
                     for k, q in self.state.queues_of(group)}
        queues = set(known)
        for topic in {t for t, _ in known}:
            config = self.topics.get(topic)
            if config is not None:
                queues.update((topic, q) for q in range(config.read_queue_nums))
        out = []
        for topic, queue_id in sorted(queues):
            committed, inflight = known.get((topic, queue_id), (None, 0))
            if committed is None:
                committed = store.min_offset_in_queue(topic, queue_id)
            end = store.max_offset_in_queue(topic, queue_id)
            out.append(QueueProgress(topic, queue_id, committed, end, max(0, end - committed),
                                     inflight))
        return out

    def reset_offset(self, group: str, topic: str, *, queue_id: int | None = None,
                     offset: int | None = None,
                     timestamp_ms: int | None = None) -> list[tuple[int, int]]:
        """Move the group's committed offset of a topic (one queue or all) to an offset or to
        the first message stored at or after a time; what is in flight is forgotten."""
        if (offset is None) == (timestamp_ms is None):
            raise V2Error(d.BAD_REQUEST, "give exactly one of offset and timestamp")
        config = self.topics.get(topic)
        if config is None:
            raise V2Error(d.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        count = config.read_queue_nums
        if queue_id is not None and not 0 <= queue_id < count:
            raise V2Error(d.BAD_REQUEST, f"queue {queue_id} is not in [0, {count})")
        if offset is not None and offset < 0:
            raise V2Error(d.ILLEGAL_OFFSET, f"offset {offset} is negative")
        self.ensure_loaded()
        self.group(group, create=False)
        store = self.node.store
        targets = []
        for q in ([queue_id] if queue_id is not None else range(count)):
            lo, hi = store.min_offset_in_queue(topic, q), store.max_offset_in_queue(topic, q)
            if offset is not None:
                target = min(max(offset, lo), hi)
            else:
                target = store.offset_for_timestamp(topic, q, timestamp_ms)
            targets.append((q, target))
        status = self.change([{"kind": "offset", "group": group, "topic": topic, "queue": q,
                               "offset": o} for q, o in targets])
        if status.code != d.OK:
            raise V2Error(status.code, status.message)
        log.warning("consumer offsets of %s on %s reset to %s", group, topic, targets)
        return targets

    # -- snapshots ----------------------------------------------------------------------------
    def maybe_snapshot(self) -> bool:
        master = self.node.master
        if master is None or self._loaded_for is not master:
            return False
        now = self.node.clock.now_ms()
        st = self.state
        has_state = st.events_since_snapshot > 0 or st.groups or st.queues
        due = st.events_since_snapshot >= SNAPSHOT_EVERY or (
            has_state and now - self._last_snapshot_ms >= SNAPSHOT_INTERVAL_MS)
        if not due:
            return False
        with self.lock:
            pending = self.commit(master, [self.state.snapshot_event()])
        self._last_snapshot_ms = now
        status = self.wait(master, pending)
        if status.code != d.OK:
            log.warning("consumer state snapshot: %s", status.message)
        return True


    def persist_offsets(self) -> bool:
        """Write config/consumerOffset.json when the state changed since the last write."""
        if self.node.master is None or self._loaded_for is not self.node.master:
            return False
        with self.lock:
            version = self.state.version
            if version == self._persisted_version:
                return False
            table = self.state.offset_table()
        self.offset_file.persist(table)  # DiskError propagates: the step logs it
        self._persisted_version = version
        return True


class Snapshotter(Service):
    name = "consumer-snapshot"

    def __init__(self, consumers: ConsumerService) -> None:
        super().__init__()
        self.consumers = consumers

    def step(self) -> None:
        try:
            self.consumers.maybe_snapshot()
        except V2Error as e:  # e.g. not writable now: the next step tries again
            log.warning("consumer state snapshot refused: %s", e.message)
        try:
            self.consumers.persist_offsets()
        except StoreError as e:
            log.error("cannot write consumerOffset.json: %s", e)

    def wait_interval(self) -> float:
        return 1.0


"""The consumer state of a master: a replicated table of consumer events, plus groups, progress
and offset resets on top of it.

The state (state.py) is a ReplicatedTable (cluster/replicated/) on the internal topic
`rmq_sys_CONSUMER_STATE` (records.py): every change is appended and then applied under the
table's lock, so the log order is the memory order and a replay gives the same state; waiting
for the flush and replication policy happens after the lock is released. A slave keeps no
state: the messaging service forwards consumer calls to its master, and a slave promoted by a
failover replays the table the first time a call needs it, resuming from the acks the old
master replicated.

The table keeps RocketMQ's `config/consumerOffset.json` (the committed offsets) and
`config/subscriptionGroup.json` (the group configs) as views, for RocketMQ tooling and the
audit, written on the master; its snapshots keep replay short.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from proto.apache.rocketmq.v2 import definition_pb2 as d
from store.codec import Message
from store.layout import StoreLayout
from store.retention.retention_guard import QueueConsumed

from cluster.serving.execution import in_pool
from cluster.consume.records import CONSUMER_STATE_RECORDS
from cluster.consume.state import ConsumerState, GroupInfo
from cluster.v2.convert import check_group_resource
from cluster.v2.v2_status import RECORDING_CONSUMER_STATE, V2Error, put_status, v2_require_master
from cluster.config.node_role import NotMaster
from cluster.replicated.replicated_table import AppendRefused, ReplicatedTable

if TYPE_CHECKING:
    from master.master_role import Appended, MasterRole
    from store.put_result import PutResult
    from common.clock import Clock
    from store.message_store import MessageStore

    from cluster.messaging.route import TopicRegistry
    from cluster.config.node_role import Role

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueProgress:
    topic: str
    queue_id: int
    committed_offset: int
    max_offset: int
    lag: int
    inflight: int


class ConsumerService:
    """Owns the consumer state table of this node (loaded while it leads). `lock` is the
    table's lock: it guards `state` and the order of appends."""

    def __init__(self, role: "Role", store: "MessageStore", clock: "Clock",
                 topics: "TopicRegistry") -> None:
        self.role = role
        self.store = store
        self.clock = clock
        self.topics = topics
        self.table: ReplicatedTable[ConsumerState] = ReplicatedTable(
            CONSUMER_STATE_RECORDS, ConsumerState, role, store, clock)
        layout = StoreLayout(store.config.store_path_root_dir)
        self.offset_view = self.table.add_view(layout.consumer_offset, ConsumerState.offset_table)
        self.group_view = self.table.add_view(layout.subscription_group,
                                              ConsumerState.subscription_group_table)
        self.lock = self.table.lock

    @property
    def state(self) -> ConsumerState:
        return self.table.state

    # -- loading ------------------------------------------------------------------------------
    def ensure_loaded(self) -> "MasterRole":
        """The current master role, with the state replayed for it. Call without the lock."""
        try:
            return self.table.ensure_loaded()
        except NotMaster:
            return v2_require_master(self.role, "consumer groups")

    async def loaded(self) -> "MasterRole":
        """`ensure_loaded` for a coroutine: the replay of a new master (every record of the
        table since its queue's start: 44k records took 1.4 s after a 6-minute soak) runs in
        the pool, not on the server's loop, which would stop serving every call, sends
        included, until it ends."""
        master = self.table.loaded_for_current_master()
        if master is not None:
            return master
        return await in_pool(self.ensure_loaded)

    # -- changing -----------------------------------------------------------------------------
    # A change is committed under the lock (appended and applied, no waiting) and holds once
    # its Appended is waited for, outside the lock, by the caller's execution model: a
    # coroutine awaits it, a thread calls wait(); `settled` reads the outcome as a v2 status.
    def commit(self, master: "MasterRole", events: list[dict[str, Any]],
               extra: Sequence[Message] = ()) -> "Appended":
        """Append `extra` messages and the events' records as one batch, then apply the events.
        Call with the lock held. Nothing is applied when the append is refused (V2Error)."""
        try:
            return self.table.commit(master, events, extra)
        except AppendRefused as e:
            raise V2Error.from_put(e.result, RECORDING_CONSUMER_STATE) from None

    def commit_change(self, events: list[dict[str, Any]]) -> "Appended":
        """ensure_loaded, then commit under the lock; the caller waits outside it."""
        master = self.ensure_loaded()
        with self.lock:
            return self.commit(master, events)

    def change(self, events: list[dict[str, Any]]) -> d.Status:
        """commit_change and its wait, for a caller on a thread (the admin calls)."""
        return settled(self.commit_change(events).wait())

    # -- groups -------------------------------------------------------------------------------
    def group(self, name: str) -> GroupInfo:
        """A known group's config (CONSUMER_GROUP_NOT_FOUND otherwise)."""
        info = self.state.groups.get(name)
        if info is None:
            raise V2Error(d.CONSUMER_GROUP_NOT_FOUND, f"consumer group {name} does not exist")
        return info

    def group_or_create(self, name: str) -> tuple[GroupInfo, "Appended | None"]:
        """A group's config; an unknown group is created with RocketMQ's defaults
        (autoCreateSubscriptionGroup): its record committed, and returned to be waited for
        (None when the group existed)."""
        info = self.state.groups.get(name)
        if info is not None:
            return info, None
        info = GroupInfo(name)
        return info, self.commit_change([self.state.group_event(info)])

    def list_groups(self) -> list[GroupInfo]:
        self.ensure_loaded()
        return sorted(self.state.groups.values(), key=lambda g: g.name)

    def upsert_group(self, name: str, *, fifo: bool | None = None,
                     retry_max_times: int | None = None,
                     consume_enable: bool | None = None) -> GroupInfo:
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
        store = self.store
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

    def retention_progress(self) -> list[QueueConsumed] | None:
        """What retention must keep (store/retention/retention_guard.py): every (group, topic, queue) a
        group consumed from, and the other queues of those topics (from their min offset), with
        the next offset the group consumes. None when this node does not lead (a slave keeps
        no consumer state: its retention then deletes nothing early) or the table cannot be
        replayed now. Topics no group consumed from are not listed: they count as consumed."""
        try:
            self.ensure_loaded()
        except Exception:  # not master, or a replay that failed: protect everything
            log.debug("retention progress unavailable", exc_info=True)
            return None
        with self.lock:
            known = {key: q.committed for key, q in self.state.queues.items()}
        out = [QueueConsumed(g, t, q, committed) for (g, t, q), committed in known.items()]
        for group, topic in {(g, t) for g, t, _ in known}:
            config = self.topics.get(topic)
            for q in range(config.read_queue_nums if config is not None else 0):
                if (group, topic, q) not in known:
                    out.append(QueueConsumed(group, topic, q, 0))
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
        self.group(group)
        store = self.store
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


def settled(result: "PutResult") -> d.Status:
    """A consumer state change's outcome once waited for, as the v2 status its call answers."""
    return put_status(result, RECORDING_CONSUMER_STATE)

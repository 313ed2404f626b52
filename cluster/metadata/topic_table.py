"""The topic table of a node: a replicated table (cluster/replicated/) of TopicState on the
internal topic `rmq_sys_TOPIC_TABLE` (topic_state.py has the record format), so every replica
has exactly its master's topics up to its confirm offset and a promoted slave serves every
topic with the queue counts its master had.

- The master appends and applies every change under the table's lock (the log order is the
  apply order); every other node follows: it applies the records reput dispatched (on a slave:
  up to the confirm offset), incrementally, and starts over when its log was cut below what it
  applied. A node that becomes master replays the table. QueryRoute, `topic list`, pulls and
  the consumer calls all read `get`/`all`, in any role.
- Durability. Explicit changes (Admin CreateTopic, UpdateTopic, DeleteTopic: `create`,
  `update`, `delete`) return only once their record holds under the flush and replication
  policy (the wait happens outside the lock). Topics the broker creates for itself
  (`add_missing`: auto-creation on QueryRoute/SendMessage, `%DLQ%<group>` before a dead letter,
  a topic learnt from its consume queues) are appended without waiting: the record precedes in
  the log every message that uses the topic, and durability is monotonic in the log (a flush or
  a slave's ack covers everything below an offset), so a message acknowledged after it implies
  the topic record is durable too; a record lost with an unacknowledged message costs nothing.
  `add_missing` never waits, so it may be called under another table's lock (the consumer
  state's, for a DLQ); nothing here ever takes another table's lock.
- View: `config/topics.json` in RocketMQ's format is rewritten from the table, atomically (with
  `.bak`), on every replica, whenever the table changed; the records stay the source of truth.
- Migration: a node whose table topic has never had a record and which has an old-style
  `config/topics.json` (the per-node file of earlier versions) imports it once, as one `import`
  record, the first time it leads. After that the file is only the view.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from store.json_config import TopicConfig, TopicConfigTable
from store.layout import StoreLayout
from store.put_result import PutResult

from cluster.metadata.topic_state import (TOPIC_RECORDS, TopicState, delete_event, import_event,
                                          upsert_event)
from cluster.replicated.replicated_table import ReplicatedTable

if TYPE_CHECKING:
    from common.clock import Clock
    from store.message_store import MessageStore

    from cluster.config.node_role import Role

log = logging.getLogger(__name__)


class TopicExists(LookupError):
    """Create of a topic the table has."""


class TopicMissing(LookupError):
    """Update or delete of a topic the table does not have."""


class TopicTable:
    """The node's topics. Reads work in every role; changes need the master (NotMaster),
    raise AppendRefused when the store refuses the record (nothing applied), and return the
    PutResult of the wait when they wait. `lock` is the replicated table's lock."""

    def __init__(self, role: "Role", store: "MessageStore", clock: "Clock") -> None:
        self.clock = clock
        self.path = StoreLayout(store.root).topics
        self.io = store.io
        self.replicated: ReplicatedTable[TopicState] = ReplicatedTable(
            TOPIC_RECORDS, TopicState, role, store, clock, follow=True,
            initial_events=self._legacy_import)
        self.view = self.replicated.add_view(self.path, TopicState.topics_json)
        self.lock = self.replicated.lock

    # -- reads (any role) ---------------------------------------------------------------------
    @property
    def leading(self) -> bool:
        """This node leads now (it may change the table)."""
        return self.replicated.role.master is not None

    def state(self) -> TopicState:
        return self.replicated.current()

    def get(self, name: str) -> TopicConfig | None:
        return self.state().get(name)

    def all(self) -> list[TopicConfig]:
        return self.state().all()

    @property
    def data_version(self) -> tuple[int, int]:
        """(timestamp ms, counter) of the last change: RocketMQ's dataVersion."""
        return self.state().data_version

    # -- changes the broker makes (master; never waits) ---------------------------------------
    def add_missing(self, config: TopicConfig, by: str) -> TopicConfig:
        """The table's config of `config.topic_name`; when there is none, `config` is appended
        (not waited for: see the module doc) and returned."""
        table = self.replicated
        master = table.ensure_loaded()
        existing = table.state.get(config.topic_name)
        if existing is not None:
            return existing
        with self.lock:
            existing = table.state.get(config.topic_name)
            if existing is None:
                table.commit(master, [upsert_event(config, self.clock.now_ms(), by)])
                log.info("topic %s added (%s): %d/%d queues", config.topic_name, by,
                         config.read_queue_nums, config.write_queue_nums)
                return config
        return existing

    # -- explicit changes (master, from a thread: admin calls; answer once durable) ----------------------------------------
    def create(self, config: TopicConfig) -> PutResult:
        """TopicExists when the table has the topic."""
        table = self.replicated
        master = table.ensure_loaded()
        with self.lock:  # check and append under the lock, wait outside it
            if table.state.get(config.topic_name) is not None:
                raise TopicExists(config.topic_name)
            appended = table.commit(master, [upsert_event(config, self.clock.now_ms(), "admin")])
        return appended.wait()

    def update(self, name: str, change: Callable[[TopicConfig], TopicConfig]
               ) -> tuple[TopicConfig, TopicConfig, PutResult]:
        """(old, new, result). TopicMissing when the table does not have the topic."""
        table = self.replicated
        master = table.ensure_loaded()
        with self.lock:
            old = _existing(table.state, name)
            new = change(old)
            appended = table.commit(master, [upsert_event(new, self.clock.now_ms(), "admin")])
        return old, new, appended.wait()

    def delete(self, name: str) -> tuple[TopicConfig, PutResult]:
        """(the deleted config, result). TopicMissing when the table does not have it."""
        table = self.replicated
        master = table.ensure_loaded()
        with self.lock:
            old = _existing(table.state, name)
            appended = table.commit(master, [delete_event(name, self.clock.now_ms())])
        return old, appended.wait()

    # -- migration ----------------------------------------------------------------------------
    def _legacy_import(self) -> list[dict[str, Any]]:
        """The initial events: an old-style config/topics.json as one import record (CorruptFile
        when it is unusable: better no master than one that forgot its topics)."""
        legacy = TopicConfigTable(self.path, self.io, self.clock)
        if not legacy.load() or not legacy.all():
            return []
        configs = legacy.all()
        log.warning("importing %d topic(s) from %s into the replicated topic table",
                    len(configs), self.path)
        return [import_event(configs, self.clock.now_ms())]


def _existing(st: TopicState, name: str) -> TopicConfig:
    config = st.get(name)
    if config is None:
        raise TopicMissing(name)
    return config

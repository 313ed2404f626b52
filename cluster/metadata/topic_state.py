"""The topic table as a pure state machine: which topics exist, with every field of RocketMQ's
TopicConfig (store/json_config.TopicConfig: queue counts, perm, order, topicFilterType,
topicSysFlag, attributes). No I/O: the node's TopicTable (topic_table.py) appends each event to
the internal topic `rmq_sys_TOPIC_TABLE` and applies it here, so replaying the records in log
order rebuilds exactly this state on any replica.

Records (the replicated tables' format, cluster/replicated/table_records.py: queue 0, the kind
as the tag, the event as a compact JSON body; `topic`/`topics` entries are RocketMQ's
topics.json entries, TopicConfig.to_json):

    kind      fields                               appended by                        waits
    upsert    topic: {topicName, readQueueNums,    Admin CreateTopic / UpdateTopic    yes
              writeQueueNums, perm, order, ...},   auto-create (QueryRoute, Send),    no
              ts: ms, by: admin|auto|ensure|learn  DLQ ensure, learn from the queues
    delete    topic: name, ts                      Admin DeleteTopic                  yes
    import    topics: [entry, ...], ts             the first lead of a node with an   no (WAIT
                                                   old-style config/topics.json       =false)
    snapshot  topics: [entry, ...], changes, ts    the table service (every 1,000     yes
                                                   events and hourly)

`changes` (upserts, deletes and imported topics since the table began) and the `ts` of the last
change are RocketMQ's dataVersion counter and timestamp; snapshots carry them, so every replica
writes the same topics.json.
"""
from __future__ import annotations

from typing import Any, Iterable

from common.config_values import ConfigError
from store.json_config import TopicConfig, TopicConfigTable

from cluster.replicated.table_records import TableRecords

TOPIC_TABLE_TOPIC = "rmq_sys_TOPIC_TABLE"
TOPIC_RECORDS = TableRecords(TOPIC_TABLE_TOPIC, no_wait_kinds=frozenset({"import"}))


class TopicState:
    """The topic table as a pure state machine (the module docstring): owns every topic's
    TopicConfig, the dataVersion (counter and timestamp) and the counters that drive
    snapshots and views.

    No lock and no I/O: the ReplicatedTable applies events to it under the table's lock;
    TopicTable's reads (`get`, `all`) read it without that lock."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicConfig] = {}
        self.changes = 0  # dataVersion counter
        self.timestamp = 0  # dataVersion timestamp: ts of the last change
        self.version = 0  # events applied (views are rewritten when it moves)
        self.events_since_snapshot = 0

    # -- reads --------------------------------------------------------------------------------
    def is_empty(self) -> bool:
        return not self.topics

    def get(self, name: str) -> TopicConfig | None:
        return self.topics.get(name)

    def all(self) -> list[TopicConfig]:
        """Every topic, sorted by name."""
        return [self.topics[n] for n in sorted(self.topics)]

    @property
    def data_version(self) -> tuple[int, int]:
        """(timestamp ms, counter) of the last change, RocketMQ's dataVersion."""
        return self.timestamp, self.changes

    def topics_json(self) -> dict[str, Any]:
        """config/topics.json in RocketMQ's format (store/json_config.py)."""
        return TopicConfigTable.encode(self.all(), self.timestamp, self.changes)

    # -- events -------------------------------------------------------------------------------
    def apply(self, event: dict[str, Any]) -> None:
        """Apply one event (a decoded record). Unknown kinds and bad entries raise: a replica
        must never silently skip state it does not understand."""
        kind = event["kind"]
        handler = _HANDLERS.get(kind)
        if handler is None:
            raise ValueError(f"unknown topic table event {kind!r}")
        try:
            handler(self, event)
        except ConfigError as e:  # an entry TopicConfig refuses: as bad as an unknown kind
            raise ValueError(f"bad topic table event {kind!r}: {e}") from None
        self.version += 1
        self.events_since_snapshot = 0 if kind == "snapshot" else self.events_since_snapshot + 1

    def _upsert(self, e: dict[str, Any]) -> None:
        config = TopicConfig.from_json(e["topic"])
        self.topics[config.topic_name] = config
        self._changed(e, 1)

    def _delete(self, e: dict[str, Any]) -> None:
        self.topics.pop(str(e["topic"]), None)
        self._changed(e, 1)

    def _import(self, e: dict[str, Any]) -> None:
        configs = [TopicConfig.from_json(t) for t in e["topics"]]
        for config in configs:
            self.topics[config.topic_name] = config
        self._changed(e, len(configs))

    def _snapshot(self, e: dict[str, Any]) -> None:
        self.topics = {c.topic_name: c for c in (TopicConfig.from_json(t) for t in e["topics"])}
        self.changes = int(e["changes"])
        self.timestamp = int(e["ts"])

    def _changed(self, e: dict[str, Any], n: int) -> None:
        self.changes += n
        self.timestamp = int(e["ts"])

    # -- events to append ---------------------------------------------------------------------
    def snapshot_event(self) -> dict[str, Any]:
        return {"kind": "snapshot", "topics": [c.to_json() for c in self.all()],
                "changes": self.changes, "ts": self.timestamp}


def upsert_event(config: TopicConfig, ts: int, by: str) -> dict[str, Any]:
    return {"kind": "upsert", "topic": config.to_json(), "ts": ts, "by": by}


def delete_event(name: str, ts: int) -> dict[str, Any]:
    return {"kind": "delete", "topic": name, "ts": ts}


def import_event(configs: Iterable[TopicConfig], ts: int) -> dict[str, Any]:
    return {"kind": "import", "topics": [c.to_json() for c in configs], "ts": ts}


_HANDLERS = {
    "upsert": TopicState._upsert,
    "delete": TopicState._delete,
    "import": TopicState._import,
    "snapshot": TopicState._snapshot,
}

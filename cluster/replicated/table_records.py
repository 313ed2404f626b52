"""Events of a replicated table as commitlog records of its internal topic.

Each event is one message of the table's topic (e.g. `rmq_sys_CONSUMER_STATE`), queue 0:

    field        value
    topic        the table's internal topic (a reserved system topic: clients cannot write it)
    queue id     0 (one queue: the log order is the apply order)
    tag (TAGS)   the event kind, e.g. ack | offset | snapshot
    body         UTF-8 JSON object of the event, compact separators, e.g.
                 {"kind":"ack","group":"G","topic":"T","queue":1,"offset":42,"handle":7}
    WAIT         "false" for the table's no-wait kinds (a lost one only costs a redelivery, so
                 it does not wait for the flush and replication policy), absent otherwise

Replay reads the topic's consume queue from its min offset and applies every body in order; a
`snapshot` event replaces the whole state, so retention may delete older records as long as a
newer snapshot exists (the table writes one periodically).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from store import codec
from store.codec import Message

SNAPSHOT_KIND = "snapshot"


class TableRecordError(ValueError):
    """A record that cannot be decoded: replay stops rather than guess."""


@dataclass(frozen=True)
class TableRecords:
    """The record format of one table: its topic and the kinds that do not wait."""
    topic: str
    no_wait_kinds: frozenset[str] = frozenset()

    def to_message(self, event: dict[str, Any]) -> Message:
        kind = event["kind"]
        props = {codec.PROPERTY_TAGS: kind}
        if kind in self.no_wait_kinds:
            props[codec.PROPERTY_WAIT_STORE_MSG_OK] = "false"
        body = json.dumps(event, separators=(",", ":")).encode()
        return Message(topic=self.topic, body=body, queue_id=0, properties=props)

    def from_body(self, body: bytes, where: str = "") -> dict[str, Any]:
        try:
            event = json.loads(bytes(body))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TableRecordError(f"{self.topic} record {where} is not JSON: {e}") from None
        if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
            raise TableRecordError(f"{self.topic} record {where} has no kind")
        return event

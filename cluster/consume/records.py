"""Consumer state events as commitlog records, so they replicate with the data and a new master
rebuilds every group's progress after a failover.

Each event is one message of the internal topic `rmq_sys_CONSUMER_STATE`, queue 0:

    field        value
    topic        rmq_sys_CONSUMER_STATE (a reserved system topic: clients cannot write it)
    queue id     0
    tag (TAGS)   the event kind: group | pop | ack | change | offset | snapshot
    body         UTF-8 JSON object of the event, compact separators, e.g.
                 {"kind":"ack","group":"G","topic":"T","queue":1,"offset":42,"handle":7}
    WAIT         "false" for pop events (at-least-once: a lost pop only means a redelivery),
                 absent otherwise (acks, offsets and configs wait for the flush and replication
                 policy before the client hears OK)

Replay reads the topic's consume queue from its min offset and applies every body in order;
a snapshot event replaces the state, so old records may be deleted by retention as long as a
newer snapshot exists (the service writes one periodically).
"""
from __future__ import annotations

import json
from typing import Any

from store import codec
from store.codec import Message

STATE_TOPIC = "rmq_sys_CONSUMER_STATE"
_NO_WAIT_KINDS = frozenset({"pop"})


class StateRecordError(ValueError):
    """A state record that cannot be decoded: replay stops rather than guess."""


def to_message(event: dict[str, Any]) -> Message:
    kind = event["kind"]
    props = {codec.PROPERTY_TAGS: kind}
    if kind in _NO_WAIT_KINDS:
        props[codec.PROPERTY_WAIT_STORE_MSG_OK] = "false"
    body = json.dumps(event, separators=(",", ":")).encode()
    return Message(topic=STATE_TOPIC, body=body, queue_id=0, properties=props)


def from_body(body: bytes, where: str = "") -> dict[str, Any]:
    try:
        event = json.loads(bytes(body))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StateRecordError(f"consumer state record {where} is not JSON: {e}") from None
    if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
        raise StateRecordError(f"consumer state record {where} has no kind")
    return event

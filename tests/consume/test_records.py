"""The consumer state's records: which wait for durability, and their encoding."""
from __future__ import annotations

import json

from cluster.consume.records import CONSUMER_STATE_RECORDS as RECORDS
from store.codec import Message


def test_pop_records_do_not_wait_and_acks_do():
    pop = RECORDS.to_message({"kind": "pop", "group": "G", "topic": "T", "queue": 0, "base": 0,
                      "until": 1, "skip_to": 0, "items": []})
    ack = RECORDS.to_message({"kind": "ack", "group": "G", "topic": "T", "queue": 0, "offset": 0,
                      "handle": 1})
    assert pop.properties.get("WAIT") == "false" and "WAIT" not in ack.properties
    assert json.loads(ack.body)["kind"] == "ack" and ack.properties["TAGS"] == "ack"
    assert isinstance(pop, Message)

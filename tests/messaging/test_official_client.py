"""Interop: the official RocketMQ 5 Python client (rocketmq-python-client, a declared test
dependency) produces to real node processes (tests/integration/harness), in a subprocess
(official_client_tool.py: its generated modules clash with ours in one process; HOME points at a
temp dir because the client writes ~/logs). What it sent is then checked through our Admin API.

The group signs requests (accessKey/secretKey), so the client's MQv2-HMAC-SHA1 signatures and
the slave's signed forwarding are exercised too. The official Python client sends one message
per SendMessage (it has no batch API); batches are covered by test_messaging_servicer.py.
"""
from __future__ import annotations

import os

from tests.support.official_client import client_home, run_tool
from tests.support.waiting import wait_until

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "official_client_tool.py")
AK, SK = "interop-ak", "interop-sk"
TOPIC = "InteropTopic"


def run_official(runs: list[dict], home: str) -> list[dict]:
    out = run_tool(TOOL, {"runs": runs}, home)
    return [r["receipts"] for r in out["runs"]]


def found(node, key):
    return list(node.admin().query(TOPIC, key).messages)


def test_official_producer_against_master_and_slave(group):
    master = group.master("SYNC_MASTER", accessKey=AK, secretKey=SK)
    slave = group.slave(master, 1, start=False, accessKey=AK, secretKey=SK)
    slave.start(groupAddresses=slave.address)  # clients that reach the slave know only it
    wait_until(lambda: len(master.status().in_sync_set) >= 1, timeout=20, what="slave in sync")
    with client_home(os.path.join(group.root, "client-home")) as home:
        to_master = [
            {"body": "plain-0", "tag": "TagA", "keys": ["order-0", "user-9"], "properties": {"color": "red"}},
            {"body": "plain-1", "tag": "TagB", "keys": ["order-1"]},
            {"body": "fifo-2", "tag": "TagA", "keys": ["order-2"], "message_group": "group-7"},
            {"body": "delay-3", "keys": ["order-3"], "delay_ms": 800},
        ]
        to_slave = [{"body": f"via-slave-{i}", "tag": "TagS", "keys": [f"slave-{i}"]} for i in range(2)]
        master_receipts, slave_receipts, denied = run_official([
            {"endpoint": master.address, "topic": TOPIC, "ak": AK, "sk": SK, "messages": to_master},
            {"endpoint": slave.address, "topic": TOPIC, "ak": AK, "sk": SK, "messages": to_slave},
            {"endpoint": master.address, "topic": TOPIC, "ak": AK, "sk": "wrong",
             "messages": [{"body": "refused", "keys": ["denied"]}]},
        ], home)
        assert all("error" not in r for r in master_receipts + slave_receipts), \
            (master_receipts, slave_receipts)
        # stored on the master with tag, keys, UNIQ_KEY = the client's message id, body
        for spec, receipt in zip(to_master, master_receipts):
            key = spec["keys"][0]
            wait_until(lambda: found(master, key), timeout=10, what=f"{key} on the master")
            [m] = found(master, key)
            assert m.unique_key == receipt["message_id"] and m.body == spec["body"].encode()
            assert m.tags == spec.get("tag", "") and sorted(m.keys.split()) == sorted(spec["keys"])
            if "delay_ms" not in spec:  # (a delayed message's offset is in the schedule queue)
                # the receipt's queue is the client's pick of endpoints; the server picks the
                # queue (the request carries none), the offset is the server's
                assert m.queue_offset == receipt["offset"]
        assert found(master, "user-9")[0].properties["color"] == "red"
        assert found(master, "order-2")[0].properties["__SHARDINGKEY"] == "group-7"
        delayed = found(master, "order-3")[0]  # delivered by the schedule service, not years later
        assert delayed.store_timestamp - delayed.born_timestamp < 60_000
        # via the slave: the client only knew the slave's address, the master stored it
        for spec, receipt in zip(to_slave, slave_receipts):
            assert receipt["endpoints"] == [slave.address]
            key = spec["keys"][0]
            wait_until(lambda: found(master, key), timeout=10, what=f"{key} on the master")
            [m] = found(master, key)
            assert (m.unique_key, m.body, m.tags) == (receipt["message_id"], spec["body"].encode(), "TagS")
            wait_until(lambda: found(slave, key), timeout=10, what=f"{key} replicated to the slave")
        # a wrong secret is refused and nothing is written
        assert "error" in denied[0] and not found(master, "denied")

"""Interop: the official RocketMQ 5 Python client's Producer and SimpleConsumer against real node
processes (a SYNC_MASTER and a slave), in a subprocess (official_consumer_tool.py): send, receive
and ack; tag filtering; keys found through the Admin API; redelivery after the invisibility
timeout with delivery attempt 2; a PushConsumer's nack redelivered; a delay message arriving no earlier than its time; and a
consumer that resumes after its node restarts without re-receiving what it acked."""
from __future__ import annotations

import os

import pytest

from tests.support.official_client import client_home, run_tool
from tests.support.waiting import wait_until

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "official_consumer_tool.py")


def run_steps(endpoint: str, steps: list[dict], home: str) -> list[dict]:
    return run_tool(TOOL, {"endpoint": endpoint, "steps": steps}, home, timeout=180)["steps"]


@pytest.fixture
def home(tmp_path):
    with client_home(str(tmp_path / "client-home")) as path:
        yield path


def bodies(step):
    return sorted(m["body"] for m in step["received"])


def test_official_simple_consumer(group, home):
    master = group.master("SYNC_MASTER", minInvisibleTimeMillsForRecv="1000")
    group.slave(master, 1, minInvisibleTimeMillsForRecv="1000")
    wait_until(lambda: len(master.status().in_sync_set) == 1, 20, "slave in sync")
    ep = master.address
    steps = run_steps(ep, [
        {"op": "send", "topic": "Orders", "messages": [
            {"body": f"order-{i}", "tag": "paid" if i % 2 else "new", "keys": [f"order-key-{i}"]}
            for i in range(6)]},
        {"op": "receive", "group": "Billing", "topic": "Orders", "tags": "paid", "count": 3},
        {"op": "receive", "group": "Audit", "topic": "Orders", "tags": "paid||new", "count": 6},
        # redelivery: received, not acked, invisible 1 s, then received again with attempt 2
        {"op": "send", "topic": "Retry", "messages": [{"body": "flaky"}]},
        {"op": "receive", "group": "R", "topic": "Retry", "count": 1, "ack": False,
         "invisible_s": 1},
        {"op": "receive", "group": "R", "topic": "Retry", "count": 1, "invisible_s": 10},
        # a delay message
        {"op": "send", "topic": "Later", "messages": [{"body": "in-2s", "delay_ms": 2000}]},
        {"op": "receive", "group": "D", "topic": "Later", "count": 1, "within_s": 15},
    ], home)
    assert not any("error" in s for s in steps[0]["sent"]), steps[0]
    assert bodies(steps[1]) == ["order-1", "order-3", "order-5"]
    assert all(m["tag"] == "paid" for m in steps[1]["received"])
    assert not steps[1]["ack_errors"]
    assert bodies(steps[2]) == [f"order-{i}" for i in range(6)]
    # keys through the Admin API
    assert [m.body for m in master.admin().query("Orders", "order-key-4").messages] == [b"order-4"]
    first, second = steps[4]["received"], steps[5]["received"]
    assert [m["delivery_attempt"] for m in first] == [1]
    assert [m["delivery_attempt"] for m in second] == [2]
    assert first[0]["message_id"] == second[0]["message_id"]
    assert second[0]["received_at_ms"] - first[0]["received_at_ms"] >= 900
    sent_at = steps[6]["sent"][0]["sent_at_ms"]
    assert [m["body"] for m in steps[7]["received"]] == ["in-2s"]
    assert steps[7]["received"][0]["received_at_ms"] >= sent_at + 2000 - 50


def test_official_consumer_resumes_after_restart_without_redelivery(group, home):
    master = group.master("ASYNC_MASTER", minInvisibleTimeMillsForRecv="1000")
    ep = master.address
    steps = run_steps(ep, [
        {"op": "send", "topic": "Resume", "messages": [{"body": f"m{i}"} for i in range(10)]},
        {"op": "receive", "group": "C", "topic": "Resume", "count": 4},
    ], home)
    acked = set(bodies(steps[1]))
    assert len(acked) == 4
    master.stop()
    master.start()
    assert master.address == ep
    after = run_steps(ep, [
        {"op": "receive", "group": "C", "topic": "Resume", "count": 6, "within_s": 20},
        {"op": "receive", "group": "C", "topic": "Resume", "count": 1, "within_s": 3},
    ], home)
    assert set(bodies(after[0])) == {f"m{i}" for i in range(10)} - acked
    assert after[1]["received"] == []  # nothing acked comes back


def test_official_push_consumer_with_a_nack(group, home):
    master = group.master("ASYNC_MASTER", minInvisibleTimeMillsForRecv="1000")
    steps = run_steps(master.address, [
        {"op": "send", "topic": "Pushed", "messages": [{"body": f"p{i}"} for i in range(4)]},
        {"op": "push", "group": "PushGroup", "topic": "Pushed", "count": 5, "fail_once": ["p0"]},
        {"op": "receive", "group": "PushGroup", "topic": "Pushed", "count": 1, "within_s": 3},
    ], home)
    got = steps[1]["received"]
    assert sorted((m["body"], m["delivery_attempt"]) for m in got) == \
        [("p0", 1), ("p0", 2), ("p1", 1), ("p2", 1), ("p3", 1)]
    assert steps[2]["received"] == []  # everything was acked

"""Metadata replicates with the data (issue: a promoted slave served an 8-queue topic with 4
queues and 7,945 acknowledged messages became unreachable). Real node processes: a SYNC_MASTER
and a slave, SIGKILL of the master, the slave promoted with SwitchRole (Admin API).

- Topics: the promoted node routes all 8 queues, `cluster topic list` shows the topic
  configured with 8, and a new consumer group receives every acknowledged message from all 8.
- Delayed messages: what the old master delivered is not delivered again, and what was still
  due is delivered once by the new master."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from cluster.client import ClientConfig, Connection, Message, Producer, SimpleConsumer
from tests.integration.harness import ROOT, TOKEN, in_sync
from tests.support.waiting import wait_until


def topic_list(node, tmp_path) -> dict:
    """`python -m cluster topic list --json` against one node, as an operator runs it."""
    token_file = os.path.join(str(tmp_path), "admin.token")
    with open(token_file, "w", encoding="utf-8") as f:
        f.write(TOKEN)
    r = subprocess.run([sys.executable, "-m", "cluster", "topic", "list", "--json", "--address",
                        node.address, "--token-file", token_file], capture_output=True,
                       text=True, cwd=ROOT, timeout=60, env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stdout + r.stderr
    return {t["name"]: t for t in json.loads(r.stdout)["topics"]}


def receive_all(conn: Connection, group: str, topic: str, want: int,
                timeout: float = 60) -> list:
    consumer = SimpleConsumer(conn, group, {topic: "*"}, await_duration=1, invisible_duration=30)
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for m in consumer.receive(32):
            got.append(m)
            consumer.ack(m)
    return got


def promote(slave) -> None:
    slave.admin().switch_role("ASYNC_MASTER")
    wait_until(lambda: slave.status().role == "ASYNC_MASTER", 20, "the slave leads")


def test_an_8_queue_topic_keeps_its_queues_after_sigkill_and_switch_role(group, tmp_path):
    master = group.master("SYNC_MASTER")
    slave = group.slave(master, 1)
    wait_until(in_sync(master, 1), 20, "slave in sync")
    master.admin().create_topic("Wide", queue_nums=8)  # answered once the slave acked it
    acked = set()
    with Connection(ClientConfig(master.address, request_timeout=10)) as conn:
        producer = Producer(conn)
        for i in range(160):  # one message per send: round-robin over the 8 queues
            producer.send(Message("Wide", f"wide-{i}".encode()))
            acked.add(f"wide-{i}".encode())  # SYNC_MASTER: the slave has it
    master.kill()
    promote(slave)
    with Connection(ClientConfig(slave.address, request_timeout=10)) as conn:
        assert [q.id for q in conn.route("Wide", refresh=True)] == list(range(8))
        listed = topic_list(slave, tmp_path)["Wide"]
        assert (listed["configured"], listed["read_queue_nums"], listed["write_queue_nums"]) == (
            True, 8, 8)
        got = receive_all(conn, "NewGroup", "Wide", len(acked))
    assert {m.body for m in got} == acked
    assert {m.queue_id for m in got} == set(range(8))


def test_delayed_messages_are_neither_redelivered_nor_lost_by_a_promoted_slave(group):
    master = group.master("SYNC_MASTER")
    slave = group.slave(master, 1)
    wait_until(in_sync(master, 1), 20, "slave in sync")
    now = int(time.time() * 1000)
    early = [f"early-{i}".encode() for i in range(20)]
    late = [f"late-{i}".encode() for i in range(20)]
    with Connection(ClientConfig(master.address, request_timeout=10)) as conn:
        producer = Producer(conn)
        for body in early:
            producer.send(Message("Later", body, delivery_timestamp_ms=now + 1000))
        for body in late:
            producer.send(Message("Later", body, delivery_timestamp_ms=now + 12_000))
    admin = master.admin()

    def delivered() -> int:
        info = admin.list_topics(topic="Later", with_offsets=True).topics
        return info[0].messages if info else 0
    wait_until(lambda: delivered() == len(early), 20, "the master delivered the early ones")
    top = master.status().max_offset  # the deliveries and their progress record
    wait_until(lambda: slave.status().confirm_offset >= top, 20, "the slave has them")
    assert time.time() * 1000 < now + 11_000, "too slow: the late ones are due already"
    master.kill()
    promote(slave)
    with Connection(ClientConfig(slave.address, request_timeout=10)) as conn:
        got = receive_all(conn, "DelayGroup", "Later", len(early) + len(late), timeout=60)
        time.sleep(1.5)  # anything delivered twice would be there by now
        extra = SimpleConsumer(conn, "DelayGroup", {"Later": "*"}).receive(32, await_duration=1)
    bodies = sorted(m.body for m in got + extra)
    assert bodies == sorted(early + late)  # each once: none redelivered, none lost

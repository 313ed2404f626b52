"""The load a node's heartbeat carries for the console's charts (cluster/assembly/node_status.py
node_load), from real in-process nodes serving gRPC: client sends count on the master that
stored them, receives on the master that handed them out, pulls on the replica that answered;
the master's consumer lag per consumer group; the counters start again with a new process."""
from __future__ import annotations

from cluster.client import Message, Producer, PullConsumer, SimpleConsumer
from tests.support.waiting import wait_until


def test_the_heartbeat_carries_sends_deliveries_lag_and_disk(nodes):
    master = nodes.start()
    slave = nodes.slave(master)
    with nodes.connect(master) as conn:
        Producer(conn).send_batch([Message("Orders", b"x%d" % i) for i in range(40)])
        consumer = SimpleConsumer(conn, "billing", {"Orders": "*"}, await_duration=1.0)
        got = wait_until(lambda: consumer.receive(10), 10, "a receive")
        consumer.ack_many(got)
    load = master.heartbeat_report().load
    assert load.started_ms == master.started_ms
    assert load.sent_messages == 40 and load.delivered_messages == len(got)
    assert load.consumer_lag_known and dict(load.consumer_lag) == {"billing": 40 - len(got)}
    assert 0 <= load.disk_used_ratio <= 1
    assert (load.disk_warning_ratio, load.disk_max_used_ratio) == (0.9, 0.75)
    # a slave stores no client send and knows no lag; the pulls it answers are its own
    with nodes.connect(slave) as conn:
        puller = PullConsumer(conn, "reports")
        wait_until(lambda: slave.store.max_offset_in_queue("Orders", 0) > 0, 10, "replicated")
        pulled = puller.pull("Orders", 0, 0, batch_size=32)
    assert pulled.found and pulled.messages
    s = slave.heartbeat_report().load
    assert (s.sent_messages, s.consumer_lag_known) == (0, False)
    assert s.delivered_messages == len(pulled.messages)
    assert master.heartbeat_report().load.delivered_messages == len(got)


def test_a_restarted_node_counts_from_zero_with_a_new_start(nodes):
    master = nodes.start()
    with nodes.connect(master) as conn:
        Producer(conn).send_batch([Message("Orders", b"x") for _ in range(5)])
    before = master.heartbeat_report().load
    restarted = nodes.restart(master)
    after = restarted.heartbeat_report().load
    assert before.sent_messages == 5 and after.sent_messages == 0
    assert after.started_ms > before.started_ms

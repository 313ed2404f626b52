"""Consumer state survives a hard failover: a SYNC_MASTER acknowledges acks only once its slave
has them, so after the master is killed with SIGKILL and the slave is promoted, the group
resumes exactly where its acks left off: nothing acked comes back, nothing unacked is lost,
and a delivery that was in flight (received, not acked) is delivered again.
Real node processes; the consumer talks to the slave's address throughout (the official clients
stay on whichever node of the route answers)."""
from __future__ import annotations

import time

from cluster.client import ClientConfig, Connection, Message, Producer, SimpleConsumer
from tests.integration.harness import in_sync
from tests.support.waiting import wait_until


def test_acks_survive_sigkill_of_the_master(group):
    master = group.master("SYNC_MASTER", minInvisibleTimeMillsForRecv="1000")
    slave = group.slave(master, 1, minInvisibleTimeMillsForRecv="1000")
    wait_until(in_sync(master, 1), timeout=20, what="slave in sync")
    with Connection(ClientConfig(slave.address, request_timeout=10)) as conn:
        Producer(conn).send_batch([Message("Jobs", f"job-{i}".encode()) for i in range(20)])
        consumer = SimpleConsumer(conn, "Workers", {"Jobs": "*"}, await_duration=3,
                                  invisible_duration=2)
        acked, in_flight = set(), []
        deadline = time.monotonic() + 20
        while len(acked) < 12 and time.monotonic() < deadline:
            for m in consumer.receive(4):
                if len(acked) < 12:
                    consumer.ack(m)  # answered only once the slave has the ack record
                    acked.add(m.body)
                else:
                    in_flight.append(m)
        assert len(acked) == 12
        while not in_flight and time.monotonic() < deadline:
            in_flight = consumer.receive(3)  # received, never acked
        assert in_flight
        master.kill()
        slave.admin().switch_role("ASYNC_MASTER")
        rest: dict[bytes, int] = {}
        deadline = time.monotonic() + 30
        while len(rest) < 8 and time.monotonic() < deadline:
            for m in consumer.receive(8):
                rest[m.body] = m.delivery_attempt
                consumer.ack(m)
        assert set(rest) == {f"job-{i}".encode() for i in range(20)} - acked
        # Delivered before the kill and never acked: delivered again (attempt 2 when the
        # receive record reached the slave before the kill, 1 otherwise: receives are not
        # waited for, at-least-once).
        assert {m.body for m in in_flight} <= set(rest)
        assert consumer.receive(8, await_duration=1) == []

"""The client against real node processes (tests/integration/harness): a SYNC_MASTER and its
slave. Everything goes through the SLAVE's address (writes and consumer calls are forwarded to
the master, reads are served by the slave), and a paused slave turns a send into
NotDurableError: stored once, never resent."""
from __future__ import annotations

import threading

import pytest

from cluster.client import (BatchingConfig, BatchingProducer, ClientConfig, Connection, Message,
                            NotDurableError, Producer, PullConsumer, SimpleConsumer)
from proto.apache.rocketmq.v2 import definition_pb2 as d
from tests.integration.harness import in_sync
from tests.support.waiting import wait_until


def test_through_a_slave(group):
    master = group.master("SYNC_MASTER", minInvisibleTimeMillsForRecv="1000")
    slave = group.slave(master, 1)
    wait_until(in_sync(master, 1), timeout=20, what="slave in sync")
    with Connection(ClientConfig(slave.address, request_timeout=10)) as conn:
        producer = BatchingProducer(conn, BatchingConfig(max_messages=64))
        futures: list = []
        lock = threading.Lock()

        def run(t: int) -> None:
            mine = [producer.submit(Message("P", f"{t}-{i}".encode(), tag=f"t{t % 2}"))
                    for i in range(200)]
            with lock:
                futures.extend(mine)

        workers = [threading.Thread(target=run, args=(t,)) for t in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        receipts = [f.result(30) for f in futures]
        producer.close()
        assert len({r.message_id for r in receipts}) == 800
        # reads from the slave: every message, once (offsets per queue)
        pc = PullConsumer(conn, "PG")

        def count() -> int:
            return sum(pc.query_offset("P", q, "END") for q in pc.queues("P"))

        wait_until(lambda: count() == 800, timeout=20, what="slave dispatched everything")
        seen = []
        for q in pc.queues("P"):
            offset, end = 0, pc.query_offset("P", q, "END")
            while offset < end:  # (a window without a match answers MESSAGE_NOT_FOUND)
                r = pc.pull("P", q, offset, 64, tag="t1")
                seen += [m.body for m in r.messages]
                offset = r.next_offset
        assert sorted(seen) == sorted(f"{t}-{i}".encode() for t in (1, 3) for i in range(200))
        pc.commit("P", 0, 10)  # forwarded to the master
        assert pc.committed("P", 0) == 10
        # a simple consumer through the slave (forwarded to the master's consumer state)
        sc = SimpleConsumer(conn, "SG", {"P": "t0"}, await_duration=2)
        got = []
        while len(got) < 400:
            batch = sc.receive(64, invisible_duration=30)
            assert batch, f"only {len(got)} of 400 received"
            assert sc.ack_many(batch) == [None] * len(batch)
            got += batch
        assert sorted(m.body for m in got) == sorted(f"{t}-{i}".encode() for t in (0, 2)
                                                     for i in range(200))


def test_stored_but_not_replicated_is_not_resent(group):
    master = group.master("SYNC_MASTER")
    slave = group.slave(master, 1)
    wait_until(in_sync(master, 1), timeout=20, what="slave in sync")
    with Connection(ClientConfig(master.address, request_timeout=10)) as conn:
        producer = Producer(conn)
        producer.send(Message("N", b"before"))
        # the slave in sync when it is paused: a stream that dropped during the first send (and
        # reconnects in 200 ms) would leave the master no member to wait for
        wait_until(in_sync(master, 1), timeout=20, what="slave in sync before the pause")
        slave.pause()
        try:
            with pytest.raises(NotDurableError) as e:
                producer.send(Message("N", b"late", keys="late-1"))
        finally:
            slave.resume()
        assert e.value.code == d.SLAVE_PERSISTENCE_TIMEOUT
        [receipt] = e.value.receipts
        wait_until(in_sync(master, 1), timeout=20, what="slave back in sync")
        query = lambda: list(master.admin().query("N", "late-1").messages)  # noqa: E731
        wait_until(query, timeout=20, what="the late message dispatched (confirm offset moved)")
        assert [m.unique_key for m in query()] == [receipt.message_id]  # stored exactly once

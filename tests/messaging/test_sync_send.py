"""SendMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue on a
SYNC_MASTER (ASYNC_FLUSH) run on the event loop and await the slaves' acks there
(cluster/serving/execution.py; MasterRole's Appended, awaited), with a real node
and a raw slave on 127.0.0.1: answered once acked, timed out with the slave's status when not;
more calls wait at once than the server's pool has threads, which a call waiting in a pool
thread could not. A SYNC_FLUSH master's sends await the group commit's flush there the same
way."""
from __future__ import annotations

import contextlib
import threading

import pytest
from google.protobuf.duration_pb2 import Duration

from cluster.serving.grpc_server import POOL_WORKERS
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from tests.faults import FaultyFileIO
from tests.support.nodes import CLUSTER_SECRET
from tests.support.raw_slave import AckingSlave
from tests.support.v2 import G, msg, receive, send
from tests.support.waiting import wait_until

SLAVE = "broker-a:7"
WAITERS = POOL_WORKERS + 54
SLAVE_TIMEOUT_MS = 6000


@contextlib.contextmanager
def sync_master_with_raw_slave(nodes):
    """(master, its stub, the raw slave) once the slave is in sync."""
    master = nodes.start(role="SYNC_MASTER", store={"slave_timeout": SLAVE_TIMEOUT_MS})
    with AckingSlave(master.address, SLAVE, CLUSTER_SECRET) as slave:
        wait_until(lambda: SLAVE in master.role.master.tracker.in_sync_ids(), 10,
                   "the raw slave in sync")
        yield master, nodes.stub(master), slave


def test_sync_sends_await_the_slaves_acks_on_the_loop(nodes):
    with sync_master_with_raw_slave(nodes) as (master, stub, slave):
        tracker = master.role.master.tracker
        r = stub.SendMessage(s.SendMessageRequest(messages=[msg("T", b"first")]), timeout=10)
        assert r.status.code == d.OK, r.status
        assert slave.received >= master.store.max_phy_offset() > 0

        slave.acking.clear()  # it still reads, it no longer acks
        calls = [stub.SendMessage.future(s.SendMessageRequest(messages=[msg("T", b"w%d" % i)]),
                                         timeout=60) for i in range(WAITERS)]
        # all of them wait at once: more than the pool's threads
        wait_until(lambda: tracker.waiting() == WAITERS, SLAVE_TIMEOUT_MS / 1000 - 1,
                   f"{WAITERS} sends waiting for the slave's ack")
        answers = [c.result() for c in calls]
        assert {a.status.code for a in answers} == {d.SLAVE_PERSISTENCE_TIMEOUT}
        assert all(f"slaveTimeout={SLAVE_TIMEOUT_MS} ms" in a.status.message for a in answers)
        assert all(len(a.entries) == 1 for a in answers)  # stored on the master all the same
        assert tracker.waiting() == 0


@pytest.mark.parametrize("call", ["ack", "nack", "dlq"])
def test_sync_settles_await_the_slaves_acks_on_the_loop(nodes, call):
    """Acks, nacks (ChangeInvisibleDuration) and forwards to the DLQ of received messages."""
    with sync_master_with_raw_slave(nodes) as (master, stub, slave):
        tracker = master.role.master.tracker
        for start in range(0, WAITERS, 50):
            send(stub, "A", [b"a%d" % i for i in range(start, min(start + 50, WAITERS))])
        got = []
        while len(got) < WAITERS:
            status, messages = receive(stub, "A", n=32, invisible=120, wait=2,
                                       qid=len(got) % 8)
            got += messages
        assert len(got) == WAITERS
        first = settle(stub, call, got[0]).result()
        assert first.status.code == d.OK, first.status

        slave.acking.clear()
        calls = [settle(stub, call, m) for m in got[1:]]
        wait_until(lambda: tracker.waiting() == WAITERS - 1, SLAVE_TIMEOUT_MS / 1000 - 1,
                   f"{WAITERS - 1} {call}s waiting for the slave's ack")
        answers = [c.result() for c in calls]
        assert {a.status.code for a in answers} == {d.SLAVE_PERSISTENCE_TIMEOUT}
        assert tracker.waiting() == 0


def settle(stub, call: str, message):
    """The call's future for one received message."""
    topic, sp = d.Resource(name="A"), message.system_properties
    if call == "ack":
        return stub.AckMessage.future(s.AckMessageRequest(
            group=G, topic=topic, entries=[s.AckMessageEntry(
                message_id=sp.message_id, receipt_handle=sp.receipt_handle)]), timeout=60)
    if call == "nack":
        return stub.ChangeInvisibleDuration.future(s.ChangeInvisibleDurationRequest(
            group=G, topic=topic, receipt_handle=sp.receipt_handle, message_id=sp.message_id,
            invisible_duration=Duration(seconds=30)), timeout=60)
    return stub.ForwardMessageToDeadLetterQueue.future(
        s.ForwardMessageToDeadLetterQueueRequest(
            group=G, topic=topic, receipt_handle=sp.receipt_handle, message_id=sp.message_id,
            delivery_attempt=sp.delivery_attempt, max_delivery_attempts=16), timeout=60)


class HeldFlushIO(FaultyFileIO):
    """Holds every msync of the commitlog while `flushing` is clear."""

    def __init__(self) -> None:
        super().__init__()
        self.flushing = threading.Event()
        self.flushing.set()

    def msync(self, mm, offset: int, length: int, path: str) -> None:
        if "commitlog" in path:
            assert self.flushing.wait(60), "the test never let the flush go"
        super().msync(mm, offset, length, path)


def test_sync_flush_sends_await_the_flush_on_the_loop(nodes):
    """More sends wait for one held flush than the pool has threads; each is answered OK once
    the flush returned, and not before."""
    io = HeldFlushIO()
    master = nodes.start(role="ASYNC_MASTER", io=io, store={"flush_disk_type": "SYNC_FLUSH"})
    stub = nodes.stub(master)
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg("T", b"first")]), timeout=10)
    assert r.status.code == d.OK, r.status
    io.flushing.clear()
    calls = [stub.SendMessage.future(s.SendMessageRequest(messages=[msg("T", b"w%d" % i)]),
                                     timeout=60) for i in range(WAITERS)]
    flusher = master.store.flusher
    wait_until(lambda: flusher.pending() >= WAITERS - 1, 20,
               f"{WAITERS} sends waiting for the flush")  # one may be in the held round
    assert not any(c.done() for c in calls)
    end = master.store.max_phy_offset()
    assert master.store.flushed_offset < end
    io.flushing.set()
    answers = [c.result() for c in calls]
    assert {a.status.code for a in answers} == {d.OK}
    assert master.store.flushed_offset >= end and flusher.pending() == 0

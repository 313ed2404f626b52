"""SendMessage on a SYNC_MASTER (ASYNC_FLUSH) is put on the event loop and awaits the slaves'
acks there (MasterRole.put_messages_async), with a real node and a raw slave on 127.0.0.1: it
is answered once acked, and times out with the slave's status when not; more sends wait at once
than the server's pool has threads, which a send waiting in a pool thread could not."""
from __future__ import annotations

from cluster.node.grpc_server import POOL_WORKERS
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from tests.support.nodes import CLUSTER_SECRET
from tests.support.raw_slave import AckingSlave
from tests.support.v2 import msg
from tests.support.waiting import wait_until

SLAVE = "broker-a:7"
WAITERS = POOL_WORKERS + 54
SLAVE_TIMEOUT_MS = 6000


def test_sync_sends_await_the_slaves_acks_on_the_loop(nodes):
    master = nodes.start(role="SYNC_MASTER", store={"slave_timeout": SLAVE_TIMEOUT_MS})
    tracker = master.role.master.tracker
    stub = nodes.stub(master)
    with AckingSlave(master.address, SLAVE, CLUSTER_SECRET) as slave:
        wait_until(lambda: SLAVE in tracker.in_sync_ids(), 10, "the raw slave in sync")
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

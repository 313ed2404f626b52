"""The drill "the master's store turns read-only", with a real node process: the failpoint
`fileio.write=fail_while:<trigger>` makes every write-side disk operation of the node fail
with EROFS once the test creates the trigger file, like a file system remounted read-only.
The node must refuse writes with a reason, report itself not writable and NOT_SERVING (so a
controller would fail over), and lose nothing it acknowledged before."""
from __future__ import annotations

import os

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from common.failpoints import ENV
from store.commitlog.fileio import WRITE_FAILPOINT
from store.layout import ABORT_FILE

from .harness import NodeProcess, messages, opened_store, read_queue, wait_until

TOPIC = "ReadOnlyTopic"
READ_ONLY = f"Read-only file system (failpoint {WRITE_FAILPOINT})"


def health(address: str) -> int:
    """The node's overall grpc.health.v1 status."""
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=10).status


def test_a_store_turned_read_only_refuses_writes_and_reports_not_serving(group, tmp_path):
    trigger = tmp_path / "readonly"
    node = group.add(NodeProcess(
        group.root, "master",
        {"brokerId": "0", "brokerRole": "ASYNC_MASTER", "flushDiskType": "SYNC_FLUSH"},
        env={ENV: f"{WRITE_FAILPOINT}=fail_while:{trigger}"})).start()
    client = node.admin()
    acked = messages(TOPIC, 40)
    for start in range(0, len(acked), 10):
        r = client.send(acked[start:start + 10])
        assert r.status == "PUT_OK", (r.status, r.reason)
    top = node.status().max_offset
    # Every queue's files exist before the switch, so the failure the node meets first is the
    # put's own flush (or the periodic checkpoint write), not a lagging dispatch.
    wait_until(lambda: node.status().dispatched_offset == top, 10, "the acked puts dispatched")
    assert health(node.address) == health_pb2.HealthCheckResponse.SERVING

    trigger.touch()  # the drill's switch: from now on the node's disk is read-only
    for start in (40, 50, 60):
        r = client.send(messages(TOPIC, 10, start=start))
        # UNKNOWN_ERROR for the put whose write (pwrite) failed, FLUSH_DISK_FAILED for one
        # whose flush failed, SERVICE_NOT_AVAILABLE after either
        assert r.status in ("UNKNOWN_ERROR", "FLUSH_DISK_FAILED", "SERVICE_NOT_AVAILABLE"), \
            (r.status, r.reason)
        assert READ_ONLY in r.reason, r.reason
    st = node.status()
    assert not st.writable
    assert "DISK_ERROR" in st.not_writable_reason and READ_ONLY in st.not_writable_reason
    wait_until(lambda: health(node.address) == health_pb2.HealthCheckResponse.NOT_SERVING, 10,
               "the health service NOT_SERVING")

    # Still read-only while it stops (a remounted disk stays so): whatever the exit code, the
    # messages acknowledged before the switch are in the store.
    node.stop()
    assert os.path.exists(trigger)
    assert os.path.exists(os.path.join(node.store_dir, ABORT_FILE))  # not a clean shutdown
    with opened_store(node.store_dir) as store:  # recovers abnormally, in a copy
        assert store.recovery_report.abnormal and store.max_phy_offset() >= top

        def get(queue_id: int, offset: int) -> list:
            return store.get_messages(TOPIC, queue_id, offset, 32).messages

        stored = {m.body for q in range(4) for m in read_queue(get, q)}
        missing = [m.keys for m in acked if m.body not in stored]
        assert not missing, missing  # (the refused batches may be there too: never acked)

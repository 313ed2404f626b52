"""Replication under faults, with real node processes: a paused slave and the in-sync set, a
diverged old master rejoining as a slave (also crashed right after its truncation), corrupted
chunks, and protocol violations from a raw replication client."""
from __future__ import annotations

import os
import re

import grpc

from proto import replication_pb2 as rpb
from proto import replication_pb2_grpc as rpb_grpc
from store.epoch_file import EpochFile
from store.layout import ABORT_FILE, EPOCH_FILE
from tests.support.membership import member_metadata
from tests.support.streams import Outbox

from .harness import (CLUSTER_SECRET, FAST_HA, NodeProcess, commitlog_bytes, epoch_entries,
                      in_sync, messages, opened_store, wait_until)

TOPIC = "FaultTopic"


# -- 4 --------------------------------------------------------------------------------------------
def test_paused_slave_leaves_in_sync_set_and_puts_are_refused(group):
    ha = {**FAST_HA, "haMaxTimeSlaveNotCatchup": "3000", "haHousekeepingInterval": "60000",
          "slaveTimeout": "1000"}
    strict = {"allAckInSyncStateSet": "true", "minInSyncReplicas": "3"}
    m = group.master("SYNC_MASTER", **ha, **strict)
    s1 = group.slave(m, 1, **ha)
    s2 = group.slave(m, 2, **ha)
    wait_until(in_sync(m, 2), 20, "both slaves in sync")
    client = m.admin()
    assert client.send(messages(TOPIC, 20)).status == "PUT_OK"

    s2.pause()
    # Still in the set: the put is stored on the master but not acknowledged by every slave.
    r = client.send(messages(TOPIC, 5, start=20))
    assert r.status == "FLUSH_SLAVE_TIMEOUT", (r.status, r.reason)
    st = m.status()
    assert "broker-a:2" in st.in_sync_set, st  # the timeout came from the ack wait, not the set
    wait_until(lambda: list(m.status().in_sync_set) == ["broker-a:1"], 10,
               "the paused slave left the in-sync set")
    st = m.status()
    assert [(x.node_id, x.in_sync) for x in st.slaves] == [("broker-a:1", True), ("broker-a:2", False)]
    before = st.max_offset
    for start in (25, 30):
        r = client.send(messages(TOPIC, 5, start=start))
        assert r.status == "IN_SYNC_REPLICAS_NOT_ENOUGH", (r.status, r.reason)
        assert not r.results
    assert m.status().max_offset == before, "a refused put wrote something"
    assert s1.status().max_offset == before

    s2.resume()
    wait_until(in_sync(m, 2), 20, "the resumed slave rejoined the set")
    assert s2.status().max_offset == before
    r = client.send(messages(TOPIC, 5, start=35))
    assert r.status == "PUT_OK", (r.status, r.reason)
    top = m.status().max_offset
    wait_until(lambda: s1.status().max_offset == top and s2.status().max_offset == top, 10, "acked")
    for s in (s1, s2):
        assert commitlog_bytes(s.store_dir, top) == commitlog_bytes(m.store_dir, top)
    # The refused keys were never stored anywhere.
    wait_until(lambda: all(n.status().dispatched_offset == top for n in (m, s1, s2)), 10, "dispatched")
    for node in (m, s1, s2):
        assert node.admin().query(TOPIC, "key-25").messages == []
        assert [x.keys for x in node.admin().query(TOPIC, "key-35").messages] == ["key-35"]


# -- 5 --------------------------------------------------------------------------------------------
def _diverge(group):
    """M (ASYNC_MASTER) and slave S share 100 messages; M then writes 50 that S never gets;
    both are stopped cleanly. Returns (M, S, end of the shared 100, M's end)."""
    m = group.master("ASYNC_MASTER", **FAST_HA)
    s = group.slave(m, 1, **FAST_HA)
    client = m.admin()
    for b in range(5):
        assert client.send(messages(TOPIC, 20, start=b * 20)).status == "PUT_OK"
    shared = m.status().max_offset
    wait_until(lambda: s.status().max_offset == shared, 20, "S has the 100 messages")
    assert s.stop() == 0
    for b in range(5, 15, 2):  # keys 100..149 (batches of 10)
        assert client.send(messages(TOPIC, 10, start=b * 10)).status == "PUT_OK"
    m_end = m.status().max_offset
    assert m_end > shared
    assert m.stop() == 0
    return m, s, shared, m_end


def _new_messages(n: int):
    msgs = messages(TOPIC, n, start=1000)
    for i, msg in enumerate(msgs):
        msg.keys = f"new-{i}"
        msg.body = f"new-{i}-".encode() + b"y" * 200
    return msgs


OLD_TAIL_KEYS = [f"key-{i}" for i in range(100, 150)]


def _assert_serves_no_old_tail(node) -> None:
    client = node.admin()
    for key in OLD_TAIL_KEYS[::7] + OLD_TAIL_KEYS[-1:]:
        assert client.query(TOPIC, key).messages == [], (node.name, key)


def _assert_matches(follower, leader) -> None:
    lst, fst = leader.status(), follower.status()
    assert fst.max_offset == lst.max_offset, (fst.max_offset, lst.max_offset)
    assert commitlog_bytes(follower.store_dir, lst.max_offset) == \
        commitlog_bytes(leader.store_dir, lst.max_offset)
    assert epoch_entries(fst) == epoch_entries(lst)
    wait_until(lambda: follower.status().dispatched_offset == lst.max_offset
               and leader.status().dispatched_offset == lst.max_offset, 10, "dispatched")
    for q in range(4):
        a = follower.admin().get(TOPIC, q, 0, 64).messages
        b = leader.admin().get(TOPIC, q, 0, 64).messages
        assert [(x.keys, x.body, x.commit_log_offset) for x in a] == \
            [(x.keys, x.body, x.commit_log_offset) for x in b]
    for i in range(30):
        got = follower.admin().query(TOPIC, f"new-{i}").messages
        assert [x.keys for x in got] == [f"new-{i}"]


def test_diverged_old_master_truncates_and_follows_new_master(group):
    m, s, shared, m_end = _diverge(group)
    # S comes back (its master is gone) and is promoted at runtime: epoch 1 -> 2.
    s.start()
    assert epoch_entries(s.status()) == [(1, 0)]
    st = s.admin().switch_role("ASYNC_MASTER", epoch=0)
    assert st.role == "ASYNC_MASTER" and epoch_entries(st) == [(1, 0), (2, shared)], st
    assert s.admin().send(_new_messages(30)).status == "PUT_OK"
    # The old master rejoins as a slave of S.
    m.props.update(brokerRole="SLAVE", brokerId="2", haMasterAddress=s.address)
    m.start()
    wait_until(lambda: m.status().max_offset == s.status().max_offset, 20, "M follows S")
    text = m.log_text()
    assert f"truncating {m_end} -> {shared}" in text, text[-2000:]
    _assert_serves_no_old_tail(m)
    _assert_matches(m, s)
    assert m.status().master_connected


def test_crash_right_after_truncation_does_not_bring_back_the_old_tail(group):
    m, s, shared, m_end = _diverge(group)
    # This time S is restarted as a master by config: brokerId 0, ASYNC_MASTER (epoch 2).
    s.props.update(brokerRole="ASYNC_MASTER", brokerId="0")
    del s.props["haMasterAddress"]
    s.start()
    assert s.status().role == "ASYNC_MASTER"
    assert epoch_entries(s.status()) == [(1, 0), (2, shared)]
    assert s.admin().send(_new_messages(30)).status == "PUT_OK"

    m.props.update(brokerRole="SLAVE", brokerId="1", haMasterAddress=s.address)
    m.env = {"RMQSTORE_FAILPOINTS": "slave.after_truncate=kill"}
    m.start(wait_ready=False)  # it may die before or after its ready line
    assert m.wait_exit(30) == -9, m.log_tail()
    assert "failpoint slave.after_truncate: killing this process" in m.log_text()
    assert os.path.exists(os.path.join(m.store_dir, ABORT_FILE))  # it did not shut down
    assert EpochFile(os.path.join(m.store_dir, EPOCH_FILE)).load()[-1][0] == 1

    # Read the crashed store (a copy, recovered as after a crash): the old tail is gone.
    with opened_store(m.store_dir) as store:
        assert store.max_phy_offset() == shared
        for key in OLD_TAIL_KEYS:
            assert store.query_messages(TOPIC, key) == [], key
        for q in range(4):
            assert len(store.get_messages(TOPIC, q, 0, 64).messages) == 25  # the shared 100
    assert commitlog_bytes(m.store_dir, shared) == commitlog_bytes(s.store_dir, shared)
    assert EpochFile(os.path.join(m.store_dir, EPOCH_FILE)).load() == [(1, 0)]

    # Restarted without the failpoint it never serves the old messages and matches S.
    m.env = {}
    log_size = os.path.getsize(m.log_path)
    m.start()
    _assert_serves_no_old_tail(m)
    wait_until(lambda: m.status().max_offset == s.status().max_offset, 20, "M follows S")
    _assert_serves_no_old_tail(m)
    _assert_matches(m, s)
    text = m.log_text()[log_size:]
    assert re.search(rf"following \S+ from offset {shared}\b", text), text
    assert "truncating" not in text  # nothing left to cut


# -- 6 --------------------------------------------------------------------------------------------
def test_corrupted_chunk_is_rerequested_not_stored(group):
    m = NodeProcess(group.root, "master", {"brokerId": "0", "brokerRole": "ASYNC_MASTER", **FAST_HA},
                    env={"RMQSTORE_FAILPOINTS": "master.corrupt_next_chunk=corrupt_once"})
    group.add(m).start()
    s = group.slave(m, 1, **FAST_HA)
    wait_until(in_sync(m, 1), 20, "slave in sync")
    client = m.admin()
    for b in range(10):
        assert client.send(messages(TOPIC, 20, start=b * 20)).status == "PUT_OK"
    top = m.status().max_offset
    wait_until(lambda: s.status().max_offset == top, 20, "slave caught up")
    assert "failpoint master.corrupt_next_chunk: corrupting once" in m.log_text()
    slave_log = s.log_text()
    assert len(re.findall(r"re-requesting from \d+: CRC-32C mismatch", slave_log)) == 1, slave_log
    assert "replication from" not in slave_log  # the stream was never dropped
    assert "closed" not in m.log_text()
    assert commitlog_bytes(s.store_dir, top) == commitlog_bytes(m.store_dir, top)
    assert s.stop() == 0
    with opened_store(s.store_dir) as store:  # full CRC check of every record on recovery
        assert store.max_phy_offset() == top
        assert store.recovery_report.end_offset == top


class RawSlave:
    """A hand-driven replication stream, to send what a real slave never would."""

    def __init__(self, address: str, node_id: str = "broker-a:9") -> None:
        self.node_id = node_id  # a member: it proves membership as node_id (its Hello's id)
        self.channel = grpc.insecure_channel(address)
        self._out = Outbox()
        self.call = rpb_grpc.ReplicationStub(self.channel).Stream(
            iter(self._out), timeout=20,
            metadata=member_metadata(address, node_id, CLUSTER_SECRET))

    def send(self, **body) -> None:
        self._out.put(rpb.SlaveMessage(**body))

    def hello(self, broker_name: str = "broker-a") -> None:
        self.send(hello=rpb.Hello(node_id=self.node_id, broker_name=broker_name))

    def next(self) -> rpb.MasterMessage:
        return next(self.call)

    def error(self) -> grpc.RpcError:
        """Read until the stream ends; it must end with an error."""
        try:
            for _ in self.call:
                pass
        except grpc.RpcError as e:
            return e
        raise AssertionError("the stream ended without an error")

    def close(self) -> None:
        self._out.close()
        self.call.cancel()
        self.channel.close()


def test_master_refuses_impossible_acks_and_foreign_slaves(group):
    # Small chunks and window: a raw slave that never acks is sent exactly one 4 KiB chunk.
    m = group.master("ASYNC_MASTER", haTransferBatchSize="4096", haMaxInFlightBytes="4096",
                     **FAST_HA)
    s1 = group.slave(m, 1, **FAST_HA)
    client = m.admin()
    for b in range(5):
        assert client.send(messages(TOPIC, 20, start=b * 20)).status == "PUT_OK"
    top = m.status().max_offset
    assert top > 3 * 4096
    wait_until(lambda: s1.status().max_offset == top, 20, "s1 caught up")

    cases = [  # (ack offset, what the refusal must say)
        (top + 10**9, rf"acked {top + 10**9}, beyond this master's max offset {top}"),
        (2 * 4096, r"acked 8192 but was only sent up to 4096"),  # <= max, never sent
    ]
    for ack_at, expected in cases:
        raw = RawSlave(m.address)
        try:
            raw.hello()
            first = raw.next()
            assert first.WhichOneof("body") == "welcome", first
            assert first.welcome.start_offset == 0 and first.welcome.master_max_offset == top
            chunk = raw.next()
            assert (chunk.chunk.offset, len(chunk.chunk.data)) == (0, 4096)
            raw.send(ack=rpb.Ack(max_offset=ack_at))
            err = raw.error()
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err
            assert re.search(expected, err.details()), err.details()
        finally:
            raw.close()

    raw = RawSlave(m.address, "broker-x:1")
    try:
        raw.hello(broker_name="broker-x")
        err = raw.error()
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err
        assert "belongs to broker 'broker-x'" in err.details(), err.details()
    finally:
        raw.close()

    for body, expected in [  # messages that cannot even be decoded end the stream the same way
            ({}, "unknown message from the slave: None"),
            ({"hello": rpb.Hello(node_id="broker-a:8", broker_name="broker-a",
                                 epochs=[rpb.EpochEntry(epoch=0, start_offset=0)])},
             "slave broker-a:8 sent invalid epochs: epoch 0 ")]:
        raw = RawSlave(m.address, "broker-a:8")
        try:
            raw.send(**body)
            err = raw.error()
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err
            assert expected in err.details(), err.details()
        finally:
            raw.close()

    # The real slave is still served and in sync; the raw slaves are gone from the table.
    for b in range(5, 10):
        assert client.send(messages(TOPIC, 20, start=b * 20)).status == "PUT_OK"
    top = m.status().max_offset
    wait_until(lambda: s1.status().max_offset == top, 20, "s1 still follows")
    wait_until(lambda: [x.node_id for x in m.status().slaves] == ["broker-a:1"], 10, "raw slaves gone")
    assert list(m.status().in_sync_set) == ["broker-a:1"]
    assert commitlog_bytes(s1.store_dir, top) == commitlog_bytes(m.store_dir, top)
    assert "replication from" not in s1.log_text()  # its stream was never disturbed

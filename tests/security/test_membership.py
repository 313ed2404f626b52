"""Only members replicate (issue 13): real nodes on 127.0.0.1, a rogue gRPC client.

The rogue-peer scenario: a plain gRPC client that is not a node opens Replication.Stream on the
master and sends a Hello with the broker name and an empty log. It must be refused before a
byte is streamed, never appear in the replication table or the in-sync set, and the refusal is
logged with its address. The same scenario against a replication servicer whose gate admits
everyone (the protection switched off) streams the commitlog: the test can fail.
"""
from __future__ import annotations

import logging

import grpc
import pytest

from cluster.controller.controller_config import ControllerConfig
from cluster.assembly.controller_process import ControllerProcess
from cluster.serving.grpc_server import AioGrpcServer
from cluster.security import member_proof as mp
from cluster.security.member_gate import MemberCredentials
from master.replication_servicer import ReplicationServicer
from master.replication_servicer import add_to_server as add_replication_to_server
from proto import controller_pb2 as cpb
from proto import controller_pb2_grpc as cpb_grpc
from proto import membership_pb2 as mpb
from proto import membership_pb2_grpc as mpb_grpc
from proto import replication_pb2 as rpb
from proto import replication_pb2_grpc as rpb_grpc
from store.codec import Message

from tests.support.nodes import CLUSTER_SECRET, Nodes, wait_in_sync
from tests.support.streams import Outbox
from tests.support.waiting import free_port, wait_until

WRONG_SECRET = "not-the-cluster-secret-42"


@pytest.fixture
def nodes(tmp_path):
    with Nodes(str(tmp_path)) as n:
        yield n


def fill(master, count: int = 20) -> None:
    msgs = [Message(topic="T", body=b"secret body %d" % i, queue_id=0) for i in range(count)]
    assert master.put_messages(msgs).status.name == "PUT_OK"


def rogue_stream(address: str, metadata=()) -> tuple[list, grpc.RpcError | None]:
    """What a non-member gets: a Hello with the broker name and an empty log, then read for up
    to 3 s. (messages received, the error that ended the call)."""
    got, error = [], None
    with grpc.insecure_channel(address) as channel:
        outbox = Outbox()
        outbox.put(rpb.SlaveMessage(hello=rpb.Hello(node_id="rogue:9", broker_name="broker-a",
                                                    max_offset=0, min_offset=0)))
        call = rpb_grpc.ReplicationStub(channel).Stream(iter(outbox), metadata=metadata,
                                                         timeout=3)
        try:
            for msg in call:
                got.append(msg)
                if msg.HasField("chunk") and msg.chunk.data:
                    outbox.put(rpb.SlaveMessage(ack=rpb.Ack(max_offset=msg.chunk.offset + len(
                        msg.chunk.data))))
        except grpc.RpcError as e:
            error = e
        finally:
            outbox.close()
    return got, error


def streamed_bytes(messages) -> int:
    return sum(len(m.chunk.data) for m in messages if m.HasField("chunk"))


def test_a_rogue_peer_gets_nothing_and_is_never_in_sync(nodes, caplog):
    master = nodes.start()
    fill(master)
    with caplog.at_level(logging.WARNING, logger="cluster.security.member_gate"):
        got, error = rogue_stream(master.address)
    assert got == [] and streamed_bytes(got) == 0
    assert error is not None and error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "no membership proof" in error.details()
    tracker = master.role.master.tracker
    assert "rogue:9" not in tracker.member_ids() | tracker.in_sync_ids()
    assert all(s.slave_id != "rogue:9" for s in tracker.states(master.store.max_phy_offset()))
    assert any("refused" in r.getMessage() and "127.0.0.1" in r.getMessage()
               for r in caplog.records)


def test_without_the_gate_the_same_rogue_reads_the_log(nodes):
    """The protection switched off (a servicer that admits everyone): the rogue streams the
    commitlog, bodies included. This is what the test above would see without the gate."""
    master = nodes.start()
    fill(master)
    server = AioGrpcServer(name="open-replication")
    server.add(lambda s: add_replication_to_server(
        ReplicationServicer(lambda: master.role.master, master.role.not_master_reason,
                            lambda peer, metadata: ""), s))
    port = server.add_port("127.0.0.1:0", None)
    server.start()
    try:
        got, _ = rogue_stream(f"127.0.0.1:{port}")
    finally:
        server.stop(0)
    data = b"".join(m.chunk.data for m in got if m.HasField("chunk"))
    assert b"secret body 19" in data


def test_a_wrong_secret_is_refused_both_ways(nodes):
    master = nodes.start()
    fill(master)
    # the peer with a wrong secret: the master's own proof does not check out for it ...
    with grpc.insecure_channel(master.address) as channel:
        with pytest.raises(mp.MembershipRefused, match="does not know the cluster secret"):
            MemberCredentials(WRONG_SECRET.encode(), "broker-a:7").metadata(
                channel, mp.REPLICATION_STREAM)
        # ... and its proof, sent anyway, is refused by the master
        cn = mp.new_client_nonce()
        answer = mpb_grpc.MembershipStub(channel).Challenge(mpb.ChallengeRequest(
            node_id="broker-a:7", purpose=mp.REPLICATION_STREAM, client_nonce=cn))
        header = mp.client_header(WRONG_SECRET.encode(), mp.REPLICATION_STREAM, "broker-a:7",
                                  cn, answer.server_nonce)
    got, error = rogue_stream(master.address, metadata=[header])
    assert got == [] and error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "wrong cluster secret" in error.details()


def test_a_replayed_proof_is_refused(nodes):
    master = nodes.start()
    with grpc.insecure_channel(master.address) as channel:
        metadata = MemberCredentials(CLUSTER_SECRET.encode(), "rogue:9").metadata(
            channel, mp.REPLICATION_STREAM)
    first, _ = rogue_stream(master.address, metadata)
    assert first and first[0].HasField("welcome")  # a member (it knows the secret) is admitted
    again, error = rogue_stream(master.address, metadata)
    assert again == [] and error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "already used" in error.details()


def test_a_member_cannot_claim_another_node_id_in_its_hello(nodes):
    master = nodes.start()
    with grpc.insecure_channel(master.address) as channel:
        metadata = MemberCredentials(CLUSTER_SECRET.encode(), "broker-a:5").metadata(
            channel, mp.REPLICATION_STREAM)
    got, error = rogue_stream(master.address, metadata)  # its Hello says rogue:9
    assert streamed_bytes(got) == 0 and error.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "proved membership as 'broker-a:5'" in error.details()


def test_a_slave_with_the_wrong_secret_never_joins(nodes):
    master = nodes.start(role="SYNC_MASTER")
    good = nodes.slave(master, "good", broker_id=1)
    bad = nodes.start("bad", role="SLAVE", broker_id=2, master_address=master.address,
                      cluster_secret=WRONG_SECRET)
    fill(master)
    wait_until(lambda: "membership" in bad.status().replication_error, 10,
               "the wrong-secret slave reports why")
    assert "does not know the cluster secret" in bad.status().replication_error
    wait_in_sync(master, good)
    tracker = master.role.master.tracker
    assert "broker-a:2" not in tracker.member_ids() | tracker.in_sync_ids()
    assert bad.store.max_phy_offset() == 0 and good.store.max_phy_offset() > 0


def test_a_node_without_a_secret_admits_nobody(nodes):
    master = nodes.start(cluster_secret="")
    got, error = rogue_stream(master.address)
    assert got == [] and error.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "no cluster secret" in error.details()


@pytest.fixture
def controller(tmp_path):
    proc = ControllerProcess(ControllerConfig(listen_address=f"127.0.0.1:{free_port()}",
                                              store_path=str(tmp_path / "controller"),
                                              cluster_secret=CLUSTER_SECRET))
    proc.start()
    yield proc
    proc.stop()


def heartbeat(node_id: str) -> cpb.NodeHeartbeat:
    return cpb.NodeHeartbeat(cluster_name="C", broker_name="broker-a", node_id=node_id,
                             address="127.0.0.1:1", role="SLAVE", healthy=True)


def test_the_controller_admits_only_members(controller):
    with grpc.insecure_channel(controller.address) as channel:
        stub = cpb_grpc.ControllerStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Heartbeat(heartbeat("broker-a:1"), timeout=5)
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(mp.MembershipRefused):
            MemberCredentials(WRONG_SECRET.encode(), "broker-a:1").metadata(
                channel, mp.CONTROLLER_HEARTBEAT)
        member = MemberCredentials(CLUSTER_SECRET.encode(), "broker-a:1")
        # a proof for the replication stream does not open a heartbeat
        with pytest.raises(grpc.RpcError) as wrong_purpose:
            stub.Heartbeat(heartbeat("broker-a:1"), timeout=5,
                           metadata=member.metadata(channel, mp.REPLICATION_STREAM))
        assert "issued for" in wrong_purpose.value.details()
        # a member may not speak for another node
        with pytest.raises(grpc.RpcError) as other:
            stub.Heartbeat(heartbeat("broker-a:2"), timeout=5,
                           metadata=member.metadata(channel, mp.CONTROLLER_HEARTBEAT))
        assert other.value.code() is grpc.StatusCode.PERMISSION_DENIED
        answer = stub.Heartbeat(heartbeat("broker-a:1"), timeout=5,
                                metadata=member.metadata(channel, mp.CONTROLLER_HEARTBEAT))
        # the only node the controller heard from leads the group (SYNC_MASTER by default)
        assert (answer.role, answer.master_id, answer.epoch) == ("SYNC_MASTER", "broker-a:1", 1)
    groups = controller.service.snapshots()
    seen = {node for g in groups for node in g.reports}
    assert seen == {"broker-a:1"}  # only the admitted heartbeat reached the controller

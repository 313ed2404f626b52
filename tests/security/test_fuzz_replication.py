"""Fuzz of the Replication stream on a master: sequences of slave messages (Hello, Ack, Nack)
with garbage fields (another broker name, offsets before, beyond or far beyond the log, acks
before any Hello or beyond what was sent, nacks of negative offsets, epochs out of order) and
raw bytes that are not a SlaveMessage. Every stream ends on its own within the call's deadline
with a gRPC status that names the reason (never UNKNOWN/INTERNAL), the master's log is not
changed by it, its registry of slave connections is back to what it was, and it keeps
serving.

Each stream first gets past the membership gate (issue 13, item 1) with a proof made from the
cluster secret (`membership_metadata`), so the fuzz reaches the replication messages: a
member's bugs or a compromised member must not break the master either.
"""
from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cluster.assembly.node import Node
from cluster.security.member_gate import MemberCredentials
from cluster.security.member_proof import REPLICATION_STREAM
from proto import replication_pb2 as pb
from proto import replication_pb2_grpc as pb_grpc

from tests.security.fuzz_strategies import messages, raw_bodies
from tests.security.node_checks import Watch, assert_serving
from tests.support.nodes import CLUSTER_SECRET
from tests.support.v2 import send
from tests.support.waiting import wait_until

STREAM_PATH = "/rmqstore.replication.v1.Replication/Stream"
STREAM_TIMEOUT = 8.0
PEER = "broker-a:9"  # the node id the fuzzing peer proves (the module's node is broker-a)
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def membership_metadata(node: Node, channel: grpc.Channel) -> list[tuple[str, str]]:
    """What a member presents to open a Replication stream on `node` (the proof of issue 13,
    item 1): a proof made with the cluster secret, as a real slave would, so this fuzz tests
    the messages behind the gate (the gate's own refusals have their tests)."""
    credentials = MemberCredentials(CLUSTER_SECRET.encode(), PEER)
    return credentials.metadata(channel, REPLICATION_STREAM)


@pytest.fixture(scope="module")
def node(module_nodes):
    node = module_nodes.start("repl-fuzz")
    send(module_nodes.stub(node), "repl-T", [b"a" * 100 for _ in range(20)])
    return node


@pytest.fixture(scope="module")
def stub(module_nodes, node):
    return module_nodes.stub(node)


@pytest.fixture(scope="module")
def channel(node):
    with grpc.insecure_channel(node.address) as ch:
        yield ch


def _hellos(node_broker: str):
    epochs = st.lists(messages(pb.EpochEntry), max_size=4)
    return messages(pb.Hello, broker_name=st.sampled_from([node_broker, "", "other", "x" * 300]),
                    node_id=st.sampled_from([PEER, PEER, "broker-a:1", "", "\x00", "x" * 300]),
                    epochs=epochs)


def _streams(node_broker: str):
    one = st.one_of(_hellos(node_broker).map(lambda h: pb.SlaveMessage(hello=h)),
                    messages(pb.Ack).map(lambda a: pb.SlaveMessage(ack=a)),
                    messages(pb.Nack).map(lambda n: pb.SlaveMessage(nack=n)),
                    st.just(pb.SlaveMessage()))  # no body at all
    return st.lists(one, min_size=1, max_size=6)


def _run_stream(node: Node, channel: grpc.Channel, requests, *, raw: bool = False) -> None:
    watch = Watch(node)
    connections = len(node.role.master.connections())
    metadata = membership_metadata(node, channel)
    what = f"Stream({[str(r)[:120] for r in requests]})"
    call = (channel.stream_stream(STREAM_PATH) if raw
            else pb_grpc.ReplicationStub(channel).Stream)
    try:
        answers = call(iter(requests), timeout=STREAM_TIMEOUT, metadata=metadata)
        for _ in answers:
            pass  # the stream must end by itself once our side is done
    except grpc.RpcError as e:
        watch.error(e, what)
    else:
        watch.nothing_written(what)
    wait_until(lambda: len(node.role.master.connections()) == connections, timeout=5,
               what=f"the master to drop the connection of {what}")


def test_slave_messages_with_garbage_end_cleanly(node, stub, channel):
    broker = node.config.broker_name

    @FUZZ
    @given(requests=_streams(broker))
    @example(requests=[pb.SlaveMessage(ack=pb.Ack(max_offset=2 ** 63 - 1))])  # ack before Hello
    @example(requests=[pb.SlaveMessage(hello=pb.Hello(broker_name=broker, node_id=PEER,
                                                      max_offset=-1))])
    @example(requests=[pb.SlaveMessage(hello=pb.Hello(broker_name=broker, node_id=PEER,
                                                      max_offset=2 ** 63 - 1))])
    @example(requests=[pb.SlaveMessage(hello=pb.Hello(broker_name=broker, node_id=PEER)),
                       pb.SlaveMessage(nack=pb.Nack(offset=-5, reason="\x00" * 10))])
    def run(requests):
        _run_stream(node, channel, requests)

    run()
    assert_serving(node, stub)


def test_bytes_that_are_not_a_slave_message_end_cleanly(node, stub, channel):
    @FUZZ
    @given(bodies=st.lists(raw_bodies, min_size=1, max_size=3))
    def run(bodies):
        _run_stream(node, channel, bodies, raw=True)

    run()
    assert_serving(node, stub)

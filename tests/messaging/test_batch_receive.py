"""ReceiveMessages (proto/batch_receive.proto) against real nodes: the v2 ReceiveMessage's
answer in one response, under the same rules. The two forms hand out the same messages with
handles AckMessage takes, refusals answer the same status and change nothing, a slave
forwards the call, the ACL checks it like ReceiveMessage, and the client library uses it where
it is served and falls back to the stream where it is not."""
from __future__ import annotations

import asyncio

from concurrent import futures

import grpc
import pytest

from cluster.client import Message, Producer, SimpleConsumer
from cluster.messaging.send import MasterForwarder
from cluster.v2.v2_status import V2Error
from cluster.security.access import AclConfig
from cluster.security.signature import sign
from proto import batch_receive_pb2 as br
from proto.apache.rocketmq.v2 import definition_pb2 as d
from tests.support.files import replace_file
from tests.support.nodes import MethodLog, methods_called, settle
from tests.support.v2 import ack, bodies, receive, receive_request, send

G2 = d.Resource(name="G2")


def batch(stub, **kw) -> br.ReceiveMessagesResponse:
    kw.setdefault("invisible", 30)
    return stub.ReceiveMessages(receive_request(**kw), timeout=10)


@pytest.fixture
def node(nodes):
    node = nodes.start()
    send(nodes.stub(node), "T", [b"m0", b"m1", b"m2"], tag="a")
    send(nodes.stub(node), "T", [b"x0"], tag="b")
    settle(node)
    return node


def test_one_response_carries_what_the_stream_hands_out(nodes, node):
    stub, bstub = nodes.stub(node), nodes.batch_stub(node)
    status, streamed = receive(stub, tags="a", invisible=30)
    answer = batch(bstub, group=G2, tags="a")
    assert status.code == answer.status.code == d.OK
    assert answer.HasField("delivery_timestamp")
    assert bodies(streamed) == bodies(answer.messages) == [b"m0", b"m1", b"m2"]
    for m, n in zip(sorted(streamed, key=lambda m: m.body),
                    sorted(answer.messages, key=lambda m: m.body)):
        sp, sq = m.system_properties, n.system_properties
        assert (sp.message_id, sp.tag, sp.queue_offset, sp.delivery_attempt) == \
            (sq.message_id, sq.tag, sq.queue_offset, sq.delivery_attempt)
        assert sq.invisible_duration.seconds == 30 and sq.receipt_handle != sp.receipt_handle
    # the handles are the consumer state's: AckMessage takes them, the group's next receive is
    # empty, and group G2's deliveries stay G2's (G's handles are refused for G2)
    assert ack(stub, answer.messages, group=G2).status.code == d.OK
    assert batch(bstub, group=G2, tags="a").status.code == d.MESSAGE_NOT_FOUND
    refused = ack(stub, streamed[:1], group=G2)
    assert refused.entries[0].status.code == d.INVALID_RECEIPT_HANDLE


def test_a_refusal_answers_the_streams_status_and_changes_nothing(nodes, node):
    bstub = nodes.batch_stub(node)
    too_big = batch(bstub, n=100_000)
    assert too_big.status.code == d.BAD_REQUEST and "batch_size" in too_big.status.message
    assert not too_big.messages
    missing = batch(bstub, topic="NoSuchTopic")
    assert missing.status.code == d.TOPIC_NOT_FOUND and "NoSuchTopic" in missing.status.message
    # nothing was handed out by the refused calls: the group still gets every message
    assert bodies(batch(bstub, n=32).messages) == [b"m0", b"m1", b"m2", b"x0"]


def test_one_answer_stays_within_its_byte_budget(nodes):
    """ReceiveMessages carries at most ConsumeSettings.max_answer_bytes (16 MiB) of records, so
    large messages never make an answer gRPC refuses (which would leave its deliveries to
    expire, again and again, into the DLQ); the rest comes with the next receive. The v2
    stream has no such bound: one response per message."""
    mib = 1024 * 1024
    node = nodes.start(store={"max_message_size": 4 * mib, "mapped_file_size_commit_log": 32 * mib})
    nodes.admin(node).create_topic("Big", queue_nums=8)
    conn = nodes.connect(node)
    producer = Producer(conn)
    for i in range(6):  # round-robin: one per queue, and a receive reads one such per queue
        producer.send(Message("Big", bytes([65 + i]) * 3_500_000))
    settle(node)
    one_answer = SimpleConsumer(conn, "G1", {"Big": "*"}, await_duration=0)
    first = one_answer.receive(32, 30)
    assert len(first) == 4 and sum(len(m.body) for m in first) <= 16 * mib
    second = one_answer.receive(32, 30)
    assert len(second) == 2
    assert sorted(m.body[:1] for m in first + second) == [bytes([65 + i]) for i in range(6)]
    streamed = SimpleConsumer(nodes.connect(node, batch_receive=False), "G2", {"Big": "*"},
                              await_duration=0)
    assert len(streamed.receive(32, 30)) == 6


def test_bytes_that_are_not_a_request_get_invalid_argument(nodes, node):
    with grpc.insecure_channel(node.address) as channel:
        call = channel.unary_unary("/rmqstore.messaging.v1.BatchReceive/ReceiveMessages")
        with pytest.raises(grpc.RpcError) as e:
            call(b"\xff\xff\xff", timeout=10)
    assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "ReceiveMessageRequest" in e.value.details()


def test_a_slave_forwards_it_to_its_master(nodes, node):
    """As ReceiveMessages: the master bounds the answer's size (a folded v2 stream would not
    be bounded)."""
    slave = nodes.slave(node)
    settle(slave)
    answer = batch(nodes.batch_stub(slave), n=32)
    assert answer.status.code == d.OK and answer.HasField("delivery_timestamp")
    assert bodies(answer.messages) == [b"m0", b"m1", b"m2", b"x0"]
    assert ack(nodes.stub(slave), answer.messages).status.code == d.OK
    assert batch(nodes.batch_stub(node), n=32).status.code == d.MESSAGE_NOT_FOUND
    used = methods_called(node)
    assert "ReceiveMessages" in used and "ReceiveMessage" not in used
    refused = batch(nodes.batch_stub(slave), topic="%bad%name")
    assert refused.status.code != d.OK and refused.status.message


ACL = """\
accounts:
  - accessKey: consumer-key
    secretKey: consumer-secret
    topicPerms:
      - T=SUB
    groupPerms:
      - G=SUB
  - accessKey: nobody-key
    secretKey: nobody-secret
"""


def test_the_acl_checks_it_like_receive_message(nodes, tmp_path):
    path = tmp_path / "plain_acl.yml"
    replace_file(path, ACL)
    node = nodes.start(acl=AclConfig(enable=True, file=str(path)))
    bstub = nodes.batch_stub(node)
    request = receive_request(invisible=30)
    unsigned = bstub.ReceiveMessages(request, timeout=10)
    assert unsigned.status.code == d.UNAUTHORIZED
    nobody = bstub.ReceiveMessages(request, timeout=10,
                                   metadata=sign("nobody-key", "nobody-secret", "c1"))
    assert nobody.status.code == d.FORBIDDEN and "nobody-key" in nobody.status.message
    allowed = bstub.ReceiveMessages(request, timeout=10,
                                    metadata=sign("consumer-key", "consumer-secret", "c1"))
    assert allowed.status.code in (d.MESSAGE_NOT_FOUND, d.TOPIC_NOT_FOUND), allowed.status



@pytest.mark.parametrize("batch_receive", [True, False])
def test_the_client_receives_in_either_form(nodes, node, batch_receive):
    conn = nodes.connect(node, batch_receive=batch_receive)
    got = SimpleConsumer(conn, "CG", {"T": "*"}, await_duration=0).receive(32, 30)
    assert sorted(m.body for m in got) == [b"m0", b"m1", b"m2", b"x0"]
    assert all(m.receipt_handle and m.delivery_attempt == 1 for m in got)
    used = methods_called(node)
    assert ("ReceiveMessages" in used) is batch_receive
    assert ("ReceiveMessage" in used) is not batch_receive


def test_a_slave_learns_when_its_master_lacks_it():
    """The forwarder answers the stand-in for UNIMPLEMENTED (the router then forwards the v2
    ReceiveMessage and folds it); without one, UNIMPLEMENTED is a forwarding error like any."""
    server = grpc.server(futures.ThreadPoolExecutor(2))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    forwarder = MasterForwarder()
    try:
        address = f"127.0.0.1:{port}"
        request = receive_request(invisible=30)
        assert asyncio.run(forwarder.call(address, "ReceiveMessages", request, 10,
                                          unimplemented=None)) is None
        with pytest.raises(V2Error) as e:
            asyncio.run(forwarder.call(address, "ReceiveMessages", request, 10))
        assert "ReceiveMessages" in e.value.status().message
    finally:
        forwarder.close()
        server.stop(None)


def test_the_client_falls_back_to_the_stream_where_the_server_lacks_it(nodes):
    """A gRPC server without BatchReceive (here one that serves nothing at all) answers
    UNIMPLEMENTED: the client asks once, then goes to the v2 stream and stays there."""
    counting = MethodLog()
    server = grpc.server(futures.ThreadPoolExecutor(2), interceptors=[counting])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        conn = nodes.connect(f"127.0.0.1:{port}")
        request = receive_request()
        assert conn.batch_call("ReceiveMessages", request) is None
        assert conn.batch_call("ReceiveMessages", request) is None  # remembered: not asked again
        assert counting.methods == ["ReceiveMessages"]
    finally:
        server.stop(None)

"""AckAndReceive (proto/batch_receive.proto) against real nodes: AckMessage, then
ReceiveMessages, in one call. The ack is applied first and in full (a FIFO group's next
message is free for the receive of the same call), each part is answered as its own call
would be and neither undoes the other, the ACL checks both parts, a slave forwards the call
whole, and the client uses it where it is served and falls back to the two calls where not.

The nodes run by a ManualClock: a delivery comes back only when a test advances the clock,
so "acked" is checked by advancing past the invisibility and receiving nothing."""
from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from cluster.client import Message, Producer, ReceiveAfterAckError, SimpleConsumer
from cluster.security.access import AclConfig
from cluster.security.signature import sign
from proto import batch_receive_pb2 as br
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store import running_flags as rf
from tests.support.files import replace_file
from tests.support.nodes import MethodLog, methods_called, settle
from tests.support.v2 import G, bodies, msg, receive_request, send

INVISIBLE = 30  # seconds


def ack_request(messages, topic: str = "T", group: d.Resource = G) -> s.AckMessageRequest:
    return s.AckMessageRequest(group=group, topic=d.Resource(name=topic), entries=[
        s.AckMessageEntry(message_id=m.system_properties.message_id,
                          receipt_handle=m.system_properties.receipt_handle) for m in messages])


def ack_and_receive(stub, acked=(), ack_topic: str = "T", metadata=None,
                    **receive) -> br.ReceiveMessagesResponse:
    receive.setdefault("invisible", INVISIBLE)
    request = br.AckAndReceiveRequest(receive=receive_request(**receive))
    if acked:
        request.ack.CopyFrom(ack_request(acked, ack_topic))
    return stub.AckAndReceive(request, timeout=10, metadata=metadata)


def receive_now(stub, **kw) -> br.ReceiveMessagesResponse:
    kw.setdefault("invisible", INVISIBLE)
    return stub.ReceiveMessages(receive_request(**kw), timeout=10)


@pytest.fixture
def node(nodes, clock):
    node = nodes.start(clock=clock)
    send(nodes.stub(node), "T", [b"m0", b"m1", b"m2", b"m3"])
    settle(node)
    return node


def test_acks_the_previous_answer_and_receives_the_next(nodes, node, clock):
    bstub = nodes.batch_stub(node)
    first = receive_now(bstub, n=2)
    assert first.status.code == d.OK and len(first.messages) == 2
    answer = ack_and_receive(bstub, first.messages, n=32)
    assert answer.ack.status.code == d.OK
    assert [e.status.code for e in answer.ack.entries] == [d.OK, d.OK]
    assert answer.status.code == d.OK and answer.HasField("delivery_timestamp")
    assert bodies(list(first.messages) + list(answer.messages)) == [b"m0", b"m1", b"m2", b"m3"]
    # acked: past the invisibility only the second answer's messages come back
    clock.advance(INVISIBLE + 1)
    again = receive_now(bstub, n=32)
    assert bodies(again.messages) == bodies(answer.messages)
    # without an ack it is ReceiveMessages; the answer has no ack part
    empty = ack_and_receive(bstub, n=32)
    assert empty.status.code == d.MESSAGE_NOT_FOUND and not empty.HasField("ack")
    assert {"AckAndReceive", "ReceiveMessages"} <= methods_called(node)
    assert "AckMessage" not in methods_called(node)


def test_the_ack_frees_a_fifo_groups_next_message_for_the_same_call(nodes, clock):
    """The ack is applied before the receive plans: in a FIFO group, the next message of the
    acked one's message group is handed out by the same call."""
    node = nodes.start(clock=clock)
    nodes.admin(node).create_topic("F", queue_nums=1)
    node.messaging.consumers.upsert_group("G", fifo=True)
    send(nodes.stub(node), "F", [b"A1", b"A2"], message_group="A")
    settle(node)
    bstub = nodes.batch_stub(node)
    first = receive_now(bstub, topic="F", n=32)
    assert bodies(first.messages) == [b"A1"]  # one in flight per message group
    answer = ack_and_receive(bstub, first.messages, ack_topic="F", topic="F", n=32)
    assert answer.ack.status.code == d.OK
    assert bodies(answer.messages) == [b"A2"]


def test_the_ack_and_the_deliveries_are_one_append(nodes, node, monkeypatch):
    """A master appends the ack's record and the receive's in one batch: one append, one
    dispatch and one replicated chunk per call."""
    bstub = nodes.batch_stub(node)
    first = receive_now(bstub, n=2)
    master = node.role.master
    appends, append = [], master.append
    monkeypatch.setattr(master, "append", lambda msgs, **kw: appends.append(
        [m.properties["TAGS"] for m in msgs]) or append(msgs, **kw))
    answer = ack_and_receive(bstub, first.messages, n=32)
    assert answer.ack.status.code == d.OK and len(answer.messages) == 2
    assert appends == [["acks", "pop"]]


def test_an_expired_delivery_acked_by_the_call_is_not_handed_out_by_it(nodes, node, clock):
    """The receive plans as if the ack were applied first: a delivery whose invisibility ran
    out (the next receive would hand it out again first) is done once the call acks it."""
    bstub = nodes.batch_stub(node)
    first = receive_now(bstub, n=1)
    clock.advance(INVISIBLE + 1)
    answer = ack_and_receive(bstub, first.messages, n=32)
    assert answer.ack.status.code == d.OK
    rest = sorted({b"m0", b"m1", b"m2", b"m3"} - {first.messages[0].body})
    assert sorted(bodies(answer.messages)) == rest
    assert all(m.system_properties.delivery_attempt == 1 for m in answer.messages)
    clock.advance(INVISIBLE + 1)
    assert sorted(bodies(receive_now(bstub, n=32).messages)) == rest


def test_an_append_refused_refuses_the_ack_and_the_receive(nodes, node):
    """The ack's record and the deliveries' are one append: refused, neither is applied, and
    both parts say so; the same ack then works once the store writes again."""
    bstub = nodes.batch_stub(node)
    first = receive_now(bstub, n=1)
    before = node.store.max_phy_offset()
    node.store.flags.set(rf.CREATE_FILE_FAILED, "the next commitlog file could not be created")
    refused = ack_and_receive(bstub, first.messages, n=32)
    assert refused.ack.status.code == refused.status.code == d.INTERNAL_SERVER_ERROR
    assert "consumer state" in refused.ack.status.message and not refused.messages
    assert node.store.max_phy_offset() == before
    node.store.flags.clear(rf.CREATE_FILE_FAILED)
    again = ack_and_receive(bstub, first.messages, n=32)
    assert again.ack.status.code == d.OK and len(again.messages) == 3


def test_a_master_that_waits_answers_receives_on_the_loop_without_a_thread(nodes, monkeypatch):
    """On a master whose writes wait (here SYNC_FLUSH) a receive, its new group's record and
    an AckAndReceive all run on the loop, the waits awaited: no call is handed to the pool
    (cluster/serving/execution.in_pool, the one way there)."""
    import cluster.serving.execution as execution
    node = nodes.start(store={"flush_disk_type": "SYNC_FLUSH"})
    send(nodes.stub(node), "T", [b"m0", b"m1", b"m2"])
    settle(node)
    # A new master replays its consumer state once, in the pool (ConsumerService.loaded):
    # done here, so that what is counted is every call after it.
    node.messaging.consumers.ensure_loaded()
    hops, to_thread = [], execution.asyncio.to_thread

    async def counted(fn, *args, **kw):
        hops.append(getattr(fn, "__name__", fn))
        return await to_thread(fn, *args, **kw)
    monkeypatch.setattr(execution.asyncio, "to_thread", counted)
    bstub = nodes.batch_stub(node)
    first = receive_now(bstub, n=1)  # G is new: created, its record awaited
    assert first.status.code == d.OK
    answer = ack_and_receive(bstub, first.messages, n=32)
    assert answer.ack.status.code == d.OK and len(answer.messages) == 2
    assert receive_now(bstub, n=32).status.code == d.MESSAGE_NOT_FOUND
    assert hops == []


def test_a_refused_receive_keeps_the_ack_and_hands_out_nothing(nodes, node, clock):
    bstub = nodes.batch_stub(node)
    first = receive_now(bstub, n=1)
    refused = ack_and_receive(bstub, first.messages, n=100_000)
    assert refused.status.code == d.BAD_REQUEST and "batch_size" in refused.status.message
    assert not refused.messages
    assert refused.ack.status.code == d.OK
    clock.advance(INVISIBLE + 1)
    # the acked message is gone; the refused receive handed nothing out
    rest = receive_now(bstub, n=32)
    assert bodies(rest.messages) == sorted({b"m0", b"m1", b"m2", b"m3"} -
                                           {first.messages[0].body})


def test_a_refused_ack_entry_does_not_stop_the_receive(nodes, node):
    bstub = nodes.batch_stub(node)
    first = receive_now(bstub, n=1)
    forged = d.Message()
    forged.CopyFrom(first.messages[0])
    forged.system_properties.receipt_handle = "R2:0:0:1:" + "0" * 32
    answer = ack_and_receive(bstub, [first.messages[0], forged], n=32)
    assert [e.status.code for e in answer.ack.entries] == [d.OK, d.INVALID_RECEIPT_HANDLE]
    assert answer.status.code == d.OK and len(answer.messages) == 3
    # an ack of a topic that does not exist is refused as AckMessage refuses it; the receive
    # still runs
    missing = ack_and_receive(bstub, first.messages, ack_topic="NoSuchTopic", n=32)
    assert missing.ack.status.code == d.TOPIC_NOT_FOUND
    assert missing.status.code == d.MESSAGE_NOT_FOUND


ACL = """\
accounts:
  - accessKey: producer-key
    secretKey: producer-secret
    topicPerms:
      - T=PUB
  - accessKey: consumer-key
    secretKey: consumer-secret
    topicPerms:
      - T=SUB
    groupPerms:
      - G=SUB
"""


def test_the_acl_checks_the_ack_and_the_receive(nodes, tmp_path, clock):
    """SUB on the receive's group and topic and on the ack's: a call lacking either is refused
    whole, before anything is applied (no ack part in the answer)."""
    path = tmp_path / "plain_acl.yml"
    replace_file(path, ACL)
    node = nodes.start(acl=AclConfig(enable=True, file=str(path)), clock=clock)
    sent = nodes.stub(node).SendMessage(
        s.SendMessageRequest(messages=[msg("T", b"m0"), msg("T", b"m1")]), timeout=10,
        metadata=sign("producer-key", "producer-secret", "p1"))
    assert sent.status.code == d.OK, sent.status
    settle(node)
    signed = sign("consumer-key", "consumer-secret", "c1")
    bstub = nodes.batch_stub(node)
    first = bstub.ReceiveMessages(receive_request(invisible=INVISIBLE, n=1), timeout=10,
                                  metadata=signed)
    assert first.status.code == d.OK, first.status
    on_other_topic = ack_and_receive(bstub, first.messages, ack_topic="Other", n=32,
                                     metadata=signed)
    assert on_other_topic.status.code == d.FORBIDDEN and "Other" in on_other_topic.status.message
    assert not on_other_topic.HasField("ack") and not on_other_topic.messages
    allowed = ack_and_receive(bstub, first.messages, n=32, metadata=signed)
    assert allowed.ack.status.code == d.OK and bodies(allowed.messages) == [b"m1"]


def test_a_slave_forwards_it_whole(nodes):
    node = nodes.start()
    send(nodes.stub(node), "T", [b"m0", b"m1", b"m2"])
    slave = nodes.slave(node)
    settle(slave)
    bstub = nodes.batch_stub(slave)
    first = receive_now(bstub, n=1)
    answer = ack_and_receive(bstub, first.messages, n=32)
    assert answer.ack.status.code == d.OK and bodies(answer.messages) == [b"m1", b"m2"]
    used = methods_called(node)
    assert "AckAndReceive" in used and "AckMessage" not in used
    # checked on the slave before forwarding: refused whole, nothing applied
    refused = ack_and_receive(bstub, answer.messages, group=d.Resource(name=""))
    assert refused.status.code == d.ILLEGAL_CONSUMER_GROUP and not refused.HasField("ack")
    assert ack_and_receive(bstub, answer.messages).ack.status.code == d.OK


def test_bytes_that_are_not_a_request_get_invalid_argument(nodes, node):
    with grpc.insecure_channel(node.address) as channel:
        call = channel.unary_unary("/rmqstore.messaging.v1.BatchReceive/AckAndReceive")
        with pytest.raises(grpc.RpcError) as e:
            call(b"\xff\xff\xff", timeout=10)
    assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "AckAndReceiveRequest" in e.value.details()


# -- the client ---------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_receive", [True, False])
def test_the_client_consumes_everything_once(nodes, clock, batch_receive):
    """ack_and_receive in a loop: every message once, all acked (nothing comes back past the
    invisibility), in one call per batch where served, else AckMessage plus a receive."""
    node = nodes.start(clock=clock)
    conn = nodes.connect(node, batch_receive=batch_receive)
    Producer(conn).send_batch([Message("T", b"%d" % i) for i in range(50)])
    settle(node)
    consumer = SimpleConsumer(conn, "CG", {"T": "*"}, await_duration=0)
    got, previous, errors = [], [], []
    while True:
        results, previous = consumer.ack_and_receive(previous, 8, INVISIBLE)
        errors += [r for r in results if r is not None]
        if not previous:
            break
        got += previous
    assert errors == [] and sorted(m.body for m in got) == sorted(b"%d" % i for i in range(50))
    clock.advance(INVISIBLE + 1)
    assert consumer.receive(32, INVISIBLE) == []
    used = methods_called(node)
    assert ("AckAndReceive" in used) is batch_receive
    assert ("AckMessage" in used) is not batch_receive


def test_the_client_reports_the_acks_when_the_receive_fails(nodes, node):
    consumer = SimpleConsumer(nodes.connect(node), "CG", {"T": "*"}, await_duration=0)
    first = consumer.receive(2, INVISIBLE)
    with pytest.raises(ReceiveAfterAckError) as e:
        consumer.ack_and_receive(first, 100_000)
    assert e.value.code == d.BAD_REQUEST and e.value.ack_results == [None, None]
    # acks of two topics: AckMessage for them, then the receive
    Producer(consumer.connection).send(Message("T2", b"t2"))
    settle(node)
    two = SimpleConsumer(consumer.connection, "CG", {"T": "*", "T2": "*"}, await_duration=0)
    got = two.receive(32, INVISIBLE, topic="T") + two.receive(32, INVISIBLE, topic="T2")
    results, more = two.ack_and_receive(got, 32)
    assert results == [None] * len(got) == [None] * 3 and more == []


def test_the_client_remembers_a_server_without_it(nodes):
    counting = MethodLog()
    server = grpc.server(futures.ThreadPoolExecutor(2), interceptors=[counting])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        conn = nodes.connect(f"127.0.0.1:{port}")
        request = br.AckAndReceiveRequest(receive=receive_request())
        assert conn.batch_call("AckAndReceive", request) is None
        assert conn.batch_call("AckAndReceive", request) is None  # not asked again
        assert counting.methods == ["AckAndReceive"]
    finally:
        server.stop(None)

"""ReceiveMessages and AckAndReceive on a node whose messages are built by the conversion
process (receiveConversionProcessEnable, a node's default; cluster/consume/conversion_*.py):
each delivered message is the one the node builds itself (record_to_v2 and the delivery's
fields), the child serves from what it converted ahead, a FIFO group and a tag filter are
planned from the records, and when the child is killed by pid the receives go on without it
(every message delivered once) until a new one serves them."""
from __future__ import annotations

import os
import signal
import time

import pytest

from proto import batch_receive_pb2 as br
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.get_result import QueueRef

from cluster.consume.answer_forms import CHILD_MIN_DELIVERIES
from cluster.consume.conversion_process import ConversionProcess
from cluster.v2.convert import record_to_v2
from tests.support.nodes import settle
from tests.support.v2 import G, msg, receive_request

INVISIBLE = 30  # seconds


def conversion_of(node) -> ConversionProcess:
    conversion = node.messaging.consumer_router.calls.answers.conversion
    assert conversion is not None
    return conversion


def stats(node) -> list[int]:
    """The child's [hits, converted, prefetched], asked on the node's loop."""
    return node._server.call(conversion_of(node).stats())


def until_ready(node, stub, bstub, topic: str = "warm") -> None:
    """Start the child with a delivery and wait until it serves (a real process starting)."""
    send_all(stub, topic, [msg(topic, b"warm%d" % i) for i in range(CHILD_MIN_DELIVERIES)])
    settle(node)
    answer = bstub.ReceiveMessages(receive_request(topic, n=32, invisible=INVISIBLE),
                                   timeout=10)
    assert len(answer.messages) == CHILD_MIN_DELIVERIES
    deadline = time.monotonic() + 30
    while not conversion_of(node).ready:
        assert time.monotonic() < deadline, "the conversion process never became ready"
        time.sleep(0.02)


def send_all(stub, topic: str, messages: list[d.Message]) -> None:
    answer = stub.SendMessage(s.SendMessageRequest(messages=messages), timeout=10)
    assert answer.status.code == d.OK, answer.status


def built_here(node, topic: str, message: d.Message, invisible_ms: int) -> d.Message:
    """What the node builds for this delivery in its own process (AnswerForms._fill)."""
    sp = message.system_properties
    record = node.store.get_messages(topic, sp.queue_id, sp.queue_offset, 1).messages[0]
    expected = d.Message()
    esp = record_to_v2(record, out=expected).system_properties
    esp.receipt_handle = sp.receipt_handle
    esp.delivery_attempt = sp.delivery_attempt
    esp.invisible_duration.seconds = invisible_ms // 1000
    esp.invisible_duration.nanos = invisible_ms % 1000 * 1_000_000
    return expected


@pytest.fixture
def node(nodes):
    return nodes.start()


def test_delivered_messages_are_the_ones_the_node_builds(nodes, node):
    stub, bstub = nodes.stub(node), nodes.batch_stub(node)
    until_ready(node, stub, bstub)
    send_all(stub, "T", [msg("T", b"plain %d" % i) for i in range(6)] + [
        msg("T", b"props", user={"color": "blue", "size": "L"}, keys=["k1", "k 2"], tag="TagA"),
        msg("T", b"\x00\xff" * 700, trace_context="00-abc-def-01")])
    settle(node)
    before = stats(node)
    answer = bstub.ReceiveMessages(receive_request("T", n=32, invisible=INVISIBLE), timeout=10)
    assert answer.status.code == d.OK and len(answer.messages) == 8
    for m in answer.messages:
        assert m == built_here(node, "T", m, INVISIBLE * 1000)
    after = stats(node)
    assert after[1] - before[1] + after[0] - before[0] >= 8  # built by the child
    assert {m.body for m in answer.messages} >= {b"props", b"\x00\xff" * 700}


def test_the_next_receive_is_served_from_what_the_child_converted_ahead(nodes):
    node = nodes.start(default_topic_queue_nums=1)
    stub, bstub = nodes.stub(node), nodes.batch_stub(node)
    until_ready(node, stub, bstub)
    send_all(stub, "One", [msg("One", b"m%d" % i) for i in range(1)])  # creates the topic
    send_all(stub, "One", [msg("One", b"m%d" % i) for i in range(1, 40)])
    settle(node)
    seen = []
    read = node.store.stats.get_messages
    first = bstub.ReceiveMessages(receive_request("One", n=8, invisible=INVISIBLE), timeout=10)
    seen += first.messages
    # the 8 handed out count as read (get_messages_total); the 8 named to the child do not
    assert node.store.stats.get_messages - read == 8
    hits = stats(node)[0]
    for _ in range(3):  # the queues handed out 8 each time: the next 8 were converted ahead
        answer = bstub.AckAndReceive(br.AckAndReceiveRequest(
            receive=receive_request("One", n=8, invisible=INVISIBLE)), timeout=10)
        seen += answer.messages
    # converted between the calls (not while one waits): at least one call's worth
    assert stats(node)[0] - hits >= 8
    assert len({m.system_properties.message_id for m in seen}) == len(seen) == 32


def test_fifo_groups_and_tag_filters_are_planned_from_the_records(nodes, node):
    """The planner needs a FIFO message's group and a filtered message's tag: those receives
    read the records (no QueueRefs)."""
    stub, bstub = nodes.stub(node), nodes.batch_stub(node)
    calls = node.messaging.consumer_router.calls
    taken = []
    plain_take = calls._take

    def recording_take(*args, **kwargs):
        deliveries, expiry = plain_take(*args, **kwargs)
        taken.extend(type(x.record) for _, x in deliveries)
        return deliveries, expiry
    calls._take = recording_take
    send_all(stub, "F", [msg("F", b"a", tag="TagA"), msg("F", b"b", tag="TagB")])
    settle(node)
    answer = bstub.ReceiveMessages(receive_request("F", tags="TagB", n=8, invisible=INVISIBLE),
                                   timeout=10)
    assert [m.body for m in answer.messages] == [b"b"]
    assert QueueRef not in taken and taken
    taken.clear()
    node.messaging.consumers.upsert_group("FIFO", fifo=True)
    answer = bstub.ReceiveMessages(receive_request("F", group=d.Resource(name="FIFO"), n=8,
                                                   invisible=INVISIBLE), timeout=10)
    assert sorted(m.body for m in answer.messages) == [b"a", b"b"]
    assert QueueRef not in taken and len(taken) == 2
    taken.clear()
    answer = bstub.ReceiveMessages(receive_request("F", group=d.Resource(name="other"), n=8,
                                                   invisible=INVISIBLE), timeout=10)
    assert sorted(m.body for m in answer.messages) == [b"a", b"b"]
    assert taken == [QueueRef, QueueRef]  # no filter, not FIFO: planned from the queues' units


def test_a_killed_child_loses_no_delivery(nodes, node):
    stub, bstub = nodes.stub(node), nodes.batch_stub(node)
    until_ready(node, stub, bstub)
    conversion = conversion_of(node)
    conversion.restart_after_s = 0.0
    bodies = [b"k%03d" % i for i in range(120)]
    send_all(stub, "K", [msg("K", b) for b in bodies])
    settle(node)
    got, acked_previous = [], []
    pid = conversion.pid
    for i in range(40):
        if i == 3:
            os.kill(pid, signal.SIGKILL)
        request = br.AckAndReceiveRequest(receive=receive_request("K", n=4, invisible=INVISIBLE))
        if acked_previous:
            request.ack.CopyFrom(s.AckMessageRequest(group=G, topic=d.Resource(name="K"), entries=[
                s.AckMessageEntry(message_id=m.system_properties.message_id,
                                  receipt_handle=m.system_properties.receipt_handle)
                for m in acked_previous]))
        answer = bstub.AckAndReceive(request, timeout=10)
        if acked_previous:
            assert answer.ack.status.code == d.OK, answer.ack
        for m in answer.messages:
            assert m == built_here(node, "K", m, INVISIBLE * 1000)
        got += [m.body for m in answer.messages]
        acked_previous = list(answer.messages)
        if len(got) >= len(bodies):
            break
    assert sorted(got) == bodies  # each once, none lost
    assert conversion.fallbacks > 0 and conversion.starts >= 2 and conversion.pid != pid


def test_the_v2_stream_delivers_the_same_messages(nodes, node):
    """ReceiveMessage (what the official clients call): a status, the delivery timestamp,
    then a response per message, each the message the node builds itself."""
    stub, bstub = nodes.stub(node), nodes.batch_stub(node)
    until_ready(node, stub, bstub)
    send_all(stub, "S", [msg("S", b"s%d" % i, user={"n": str(i)}) for i in range(5)])
    settle(node)
    before = stats(node)
    responses = list(stub.ReceiveMessage(receive_request("S", n=32, invisible=INVISIBLE),
                                         timeout=10))
    assert responses[0].status.code == d.OK and responses[1].HasField("delivery_timestamp")
    messages = [r.message for r in responses[2:]]
    assert sorted(m.body for m in messages) == [b"s%d" % i for i in range(5)]
    for m in messages:
        assert m == built_here(node, "S", m, INVISIBLE * 1000)
    after = stats(node)
    assert after[0] + after[1] - before[0] - before[1] >= 5  # built by the child
    acked = stub.AckMessage(s.AckMessageRequest(group=G, topic=d.Resource(name="S"), entries=[
        s.AckMessageEntry(message_id=m.system_properties.message_id,
                          receipt_handle=m.system_properties.receipt_handle)
        for m in messages]), timeout=10)
    assert acked.status.code == d.OK


def test_a_small_answer_is_built_by_the_node(nodes, node):
    """Fewer than CHILD_MIN_DELIVERIES messages cost the loop less built here than a round
    trip to the child."""
    stub, bstub = nodes.stub(node), nodes.batch_stub(node)
    until_ready(node, stub, bstub)
    send_all(stub, "Small", [msg("Small", b"x%d" % i) for i in range(CHILD_MIN_DELIVERIES - 1)])
    settle(node)
    before, fallbacks = stats(node), conversion_of(node).fallbacks
    answer = bstub.ReceiveMessages(receive_request("Small", n=32, invisible=INVISIBLE),
                                   timeout=10)
    assert len(answer.messages) == CHILD_MIN_DELIVERIES - 1
    for m in answer.messages:
        assert m == built_here(node, "Small", m, INVISIBLE * 1000)
    assert stats(node) == before and conversion_of(node).fallbacks == fallbacks

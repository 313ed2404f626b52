"""Receipt handles and transaction ids cannot be forged: a client that knows how they are laid
out, and holds a real one, still cannot act on another group's or topic's messages, and a
mutated handle is refused with nothing written. Two nodes of a group with the same key accept
each other's handles (they survive a failover); a node with another key does not."""
from __future__ import annotations

import zlib

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from cluster.consume import receipt
from cluster.messaging import transaction_records as tr
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from tests.security.node_checks import Watch, assert_serving
from tests.support.nodes import settle
from tests.support.v2 import (TX_KEYS, TX_TOPIC, ack, duration, end, receive, send, send_half)


def _received(nodes, node, topic: str, group: str, n: int = 2):
    stub = nodes.stub(node)
    send(stub, topic, [f"m{i}".encode() for i in range(n)])
    settle(node)
    status, got = receive(stub, topic, d.Resource(name=group), invisible=30)
    assert status.code == d.OK and len(got) == n, status
    return stub, got


def test_another_groups_or_topics_handle_is_refused(nodes):
    node = nodes.start()
    stub, [first, second] = _received(nodes, node, "Orders", "group-a")
    _received(nodes, node, "Other", "group-b", 1)
    watch = Watch(node)
    for topic, group in (("Orders", "group-b"), ("Other", "group-a"), ("Other", "group-b")):
        r = ack(stub, [first], topic=topic, group=d.Resource(name=group))
        assert r.status.code == d.INVALID_RECEIPT_HANDLE, (topic, group, r.status)
        assert "does not belong" in r.status.message
    watch.nothing_written("acks with another group's handles")
    assert ack(stub, [first, second], topic="Orders",
               group=d.Resource(name="group-a")).status.code == d.OK


def test_an_old_format_handle_is_refused_with_a_clear_message(nodes):
    """Handles of the CRC format (R1, before the MAC) are refused, saying what to do."""
    node = nodes.start()
    stub, [m] = _received(nodes, node, "Orders", "group-a", 1)
    real = receipt.decode(node.messaging.consumer_router.calls.context.receipt_key,
                          m.system_properties.receipt_handle, "Orders", "group-a")
    body = f"R1:{real.queue_id}:{real.offset}:{real.handle}"
    m.system_properties.receipt_handle = \
        f"{body}:{zlib.crc32(f'{body}:Orders:group-a'.encode()) & 0xFFFFFFFF:08X}"
    watch = Watch(node)
    r = ack(stub, [m], topic="Orders", group=d.Resource(name="group-a"))
    assert r.status.code == d.INVALID_RECEIPT_HANDLE and "old" in r.status.message, r.status
    watch.nothing_written("an ack with an old-format handle")


def test_a_handle_made_with_the_layout_but_not_the_key_is_refused(nodes):
    node = nodes.start()
    stub, [m] = _received(nodes, node, "Orders", "group-a", 1)
    real = receipt.decode(node.messaging.consumer_router.calls.context.receipt_key,
                          m.system_properties.receipt_handle, "Orders", "group-a")
    watch = Watch(node)
    for key in (b"", b"guess", node.config.broker_name.encode()):
        forged = receipt.encode(key or b"\0", "Orders", "group-a", real.queue_id, real.offset,
                                real.handle)
        m.system_properties.receipt_handle = forged
        r = ack(stub, [m], topic="Orders", group=d.Resource(name="group-a"))
        assert r.status.code == d.INVALID_RECEIPT_HANDLE, r.status
    watch.nothing_written("acks with forged handles")


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_handles_write_nothing(module_nodes, data):
    node = module_nodes.started[0] if module_nodes.started else module_nodes.start("handles")
    stub = module_nodes.stub(node)
    status, got = receive(stub, "Mut", d.Resource(name="g"), invisible=3600)
    if not got:
        send(stub, "Mut", [b"a", b"b", b"c"])
        settle(node)
        status, got = receive(stub, "Mut", d.Resource(name="g"), invisible=3600)
    handle = got[0].system_properties.receipt_handle
    i = data.draw(st.integers(0, receipt.MAX_LENGTH)) % len(handle)
    char = data.draw(st.sampled_from("0123456789ABCDEF:R-x"))
    mutated = handle[:i] + char + handle[i + 1:]
    if mutated == handle:
        return
    watch = Watch(node)
    for call, request in (
            ("AckMessage", s.AckMessageRequest(
                group=d.Resource(name="g"), topic=d.Resource(name="Mut"),
                entries=[s.AckMessageEntry(message_id="x", receipt_handle=mutated)])),
            ("ChangeInvisibleDuration", s.ChangeInvisibleDurationRequest(
                group=d.Resource(name="g"), topic=d.Resource(name="Mut"), message_id="x",
                receipt_handle=mutated, invisible_duration=duration(0))),
            ("ForwardMessageToDeadLetterQueue", s.ForwardMessageToDeadLetterQueueRequest(
                group=d.Resource(name="g"), topic=d.Resource(name="Mut"), message_id="x",
                receipt_handle=mutated))):
        answer = getattr(stub, call)(request, timeout=10)
        assert answer.status.code == d.INVALID_RECEIPT_HANDLE, (call, mutated, answer.status)
        watch.status(answer.status, call)


def test_handles_hold_on_another_node_of_the_group(nodes):
    """The key is the group's (the cluster secret), not the node's: what one node issued,
    another node of the group accepts (a failover); another key refuses it."""
    first = nodes.start("first")
    stub, [m] = _received(nodes, first, "Orders", "group-a", 1)
    text = m.system_properties.receipt_handle
    second = nodes.start("second")
    key = second.messaging.consumer_router.calls.context.receipt_key
    assert key == first.messaging.consumer_router.calls.context.receipt_key
    assert receipt.decode(key, text, "Orders", "group-a")
    other = nodes.start("other-cluster", cluster_secret="another-cluster-secret-0123456789")
    other_key = other.messaging.consumer_router.calls.context.receipt_key
    assert other_key != key
    with pytest.raises(receipt.BadReceiptHandle):
        receipt.decode(other_key, text, "Orders", "group-a")


def test_a_transaction_id_cannot_be_forged_or_used_on_another_topic(nodes):
    node = nodes.start(**TX_KEYS)
    stub = nodes.stub(node)
    entry = send_half(stub)
    settle(node)
    offset_id, _, check = entry.transaction_id.partition("-")
    watch = Watch(node)
    for transaction_id, topic in (
            (offset_id, TX_TOPIC),  # the offset id alone: what a guesser can compute
            (tr.transaction_id(b"guess", offset_id, TX_TOPIC, entry.message_id), TX_TOPIC),
            (entry.transaction_id, "Other"),  # the real id, another topic
            (offset_id + "-" + check[::-1], TX_TOPIC)):
        st_ = end(stub, entry, d.COMMIT, topic=topic, transaction_id=transaction_id)
        assert st_.code == d.INVALID_TRANSACTION_ID, (transaction_id, topic, st_)
    watch.nothing_written("forged EndTransactions")
    assert end(stub, entry, d.ROLLBACK).code == d.OK
    assert_serving(node, stub)

"""SimpleConsumer against in-process nodes: receive, ack, tag filter, invisibility and
redelivery, by the node's ManualClock (the `clock` fixture): a long poll in the background ends
by advancing the clock, long before the call's real deadline (30 s)."""
from __future__ import annotations

import pytest

from cluster.client import ClientError, ReceivedMessage, SimpleConsumer, TransportError
from proto.apache.rocketmq.v2 import definition_pb2 as d
from tests.support.client import fill
from tests.support.nodes import settle
from tests.support.waiting import in_background, waiting_on


@pytest.fixture
def consumer_node(nodes, clock):
    node = nodes.start(min_invisible_time_ms=500, clock=clock)
    return node, nodes.connect(node, request_timeout=30)


def test_receive_ack_and_filter(consumer_node, clock):
    node, conn = consumer_node
    fill(conn, "T", ["a", "b", "a"], queue_group=None)
    settle(node)
    sc = SimpleConsumer(conn, "SG", {"T": "a"}, await_duration=1)
    got = sc.receive(16, invisible_duration=30)
    assert sorted(m.body for m in got) == [b"a-0", b"a-2"]
    assert all(m.receipt_handle and m.delivery_attempt == 1 and m.invisible_duration_ms == 30_000
               for m in got)
    assert sc.ack_many(got) == [None, None]
    poll = in_background(lambda: sc.receive(16, 30, await_duration=0.5))
    waiting_on(clock)
    assert not poll.done()
    clock.advance(0.5)
    assert poll.result(timeout=10) == []  # acked: nothing left for the group
    with pytest.raises(ClientError) as e:
        sc.ack(got[0])  # already acked
    assert e.value.code == d.INVALID_RECEIPT_HANDLE
    other = SimpleConsumer(conn, "SG2", {"T": "*"}, await_duration=1)
    assert len(other.receive(16, 30)) == 3  # another group sees everything


def test_invisibility_and_redelivery(consumer_node, clock):
    node, conn = consumer_node
    fill(conn, "T", ["a"], queue_group=None)
    settle(node)
    sc = SimpleConsumer(conn, "SG", {"T": "*"}, await_duration=1)
    [m] = sc.receive(1, invisible_duration=30)
    old = m.receipt_handle
    new = sc.change_invisible_duration(m, 0)  # visible again now
    assert new != old and m.receipt_handle == new
    [again] = sc.receive(1, invisible_duration=0.6)
    assert again.message_id == m.message_id and again.delivery_attempt == 2
    with pytest.raises(ClientError) as e:  # the handle from before the change is refused
        sc.ack(ReceivedMessage(topic="T", body=b"", message_id=m.message_id, receipt_handle=old))
    assert e.value.code == d.INVALID_RECEIPT_HANDLE
    assert sc.receive(1, invisible_duration=30, await_duration=0) == []  # invisible for 0.6 s
    poll = in_background(lambda: sc.receive(1, invisible_duration=30, await_duration=3))
    waiting_on(clock)
    clock.advance(0.6)  # the expiry ends the wait
    [third] = poll.result(timeout=10)
    assert third.delivery_attempt == 3
    sc.ack(third)
    with pytest.raises(ClientError) as e:
        sc.receive(1, invisible_duration=0.1)  # under minInvisibleTimeMillsForRecv
    assert e.value.code == d.ILLEGAL_INVISIBLE_TIME


def test_receive_argument_checks(consumer_node):
    _, conn = consumer_node
    with pytest.raises(ValueError):
        SimpleConsumer(conn, "", {"T": "*"})
    with pytest.raises(ValueError):
        SimpleConsumer(conn, "G", {})
    with pytest.raises(ValueError):
        SimpleConsumer(conn, "G", {"T": "*"}).receive(topic="U")


def test_closing_the_connection_ends_a_long_poll_in_another_thread(nodes, clock):
    """Connection's promise that closing it ends every call in progress, for a server stream
    read on its caller's thread (gRPC's SingleThreadedUnaryStream, which the Connection sets):
    the waiting receive fails at once with CANCELLED, not at the end of its long poll."""
    node = nodes.start(clock=clock)
    conn = nodes.connect(node, request_timeout=30)
    fill(conn, "T", ["a"], queue_group=None)
    settle(node)
    sc = SimpleConsumer(conn, "SG", {"T": "*"}, await_duration=20)
    sc.ack_many(sc.receive(1, 30))
    poll = in_background(lambda: sc.receive(1, 30))
    waiting_on(clock)  # the stream is open and the node holds it: nothing left to deliver
    conn.close()
    with pytest.raises(TransportError) as e:
        poll.result(timeout=10)  # the poll's own end is 20 s of the clock, never advanced
    assert "CANCELLED" in str(e.value)

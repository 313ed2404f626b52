"""PullConsumer (offsets, tags, long polling, commits) and SimpleConsumer (receive, ack,
invisibility, redelivery) against in-process nodes.

Long polls and invisibility run by the node's ManualClock (the `clock` fixture): a test starts
a long poll in the background, waits until it sits in its wait, then sends or advances the
clock; the calls' real deadlines (30 s) are far beyond the few seconds a result is waited for,
so an answer in time is the send's or the clock's doing."""
from __future__ import annotations

import time

import pytest

from cluster.client import (ClientError, Message, Producer, PullConsumer, ReceivedMessage,
                            SimpleConsumer)
from proto.apache.rocketmq.v2 import definition_pb2 as d

from tests.support.nodes import settle
from tests.support.waiting import in_background, waiting_on


def fill(conn, topic, tags, queue_group="q"):
    """One batch (one queue) with the given tags; its receipts."""
    return Producer(conn).send_batch([Message(topic, f"{t}-{i}".encode(), tag=t,
                                              message_group=queue_group)
                                      for i, t in enumerate(tags)])


def queue_of(node, topic, message_id):
    for qid in range(4):
        r = node.store.get_messages(topic, qid, 0, 1000)
        if any(m.uniq_key == message_id for m in r.messages):
            return qid
    raise AssertionError("not found")


def test_pull_offsets_and_tags(nodes):
    node = nodes.start()
    conn = nodes.connect(node)
    t0 = int(time.time() * 1000)
    receipts = fill(conn, "T", ["a", "b", "a", "b", "a"])
    settle(node)
    qid = queue_of(node, "T", receipts[0].message_id)
    pc = PullConsumer(conn, "G")
    assert pc.queues("T") == [0, 1, 2, 3]
    assert pc.query_offset("T", qid, "BEGINNING") == 0
    assert pc.query_offset("T", qid, "END") == 5
    assert pc.query_offset("T", qid, "TIMESTAMP", t0 - 1000) == 0
    assert pc.query_offset("T", qid, "TIMESTAMP", int(time.time() * 1000) + 60_000) == 5
    everything = pc.pull("T", qid, 0, 32)
    assert everything.found and everything.next_offset == 5
    assert [m.queue_offset for m in everything.messages] == [0, 1, 2, 3, 4]
    only_b = pc.pull("T", qid, 0, 32, tag="b")
    assert [m.body for m in only_b.messages] == [b"b-1", b"b-3"]
    page = pc.pull("T", qid, 1, 2)
    assert [m.queue_offset for m in page.messages] == [1, 2] and page.next_offset == 3
    end = pc.pull("T", qid, 5)
    assert end.code == d.MESSAGE_NOT_FOUND and end.next_offset == 5 and not end.messages
    beyond = pc.pull("T", qid, 99)
    assert beyond.code == d.ILLEGAL_OFFSET and beyond.next_offset == 5
    with pytest.raises(ValueError):
        pc.query_offset("T", qid, "TIMESTAMP")
    with pytest.raises(ClientError) as e:
        pc.pull("T", qid, 0, tag="||")
    assert e.value.code == d.ILLEGAL_FILTER_EXPRESSION


def test_pull_long_polling_wakes_on_a_send(nodes, clock):
    node = nodes.start(clock=clock)
    conn = nodes.connect(node)
    [r] = fill(conn, "T", ["a"])
    settle(node)
    qid = queue_of(node, "T", r.message_id)
    pc = PullConsumer(conn, "G")
    poll = in_background(lambda: pc.pull("T", qid, 1, long_polling=10, timeout=30))
    waiting_on(clock)
    assert not poll.done()
    fill(conn, "T", ["a"])  # the same message group: the same queue
    got = poll.result(timeout=10)  # woken by the dispatch: the clock never moved
    assert got.found and [m.queue_offset for m in got.messages] == [1]
    # an empty queue: the poll waits, and ends when 0.5 s of the clock passed
    poll = in_background(lambda: pc.pull("T", qid, 2, long_polling=0.5, timeout=30))
    waiting_on(clock)
    assert not poll.done()
    clock.advance(0.5)
    assert poll.result(timeout=10).code == d.MESSAGE_NOT_FOUND


def test_committed_offsets(nodes):
    node = nodes.start()
    conn = nodes.connect(node)
    fill(conn, "T", ["a"] * 3)
    settle(node)
    pc = PullConsumer(conn, "G")
    assert pc.committed("T", 0) is None
    pc.commit("T", 0, 0)
    assert pc.committed("T", 0) == 0
    end = pc.query_offset("T", 0, "END")
    pc.commit("T", 0, end)
    assert pc.committed("T", 0) == end
    assert PullConsumer(conn, "Other").committed("T", 0) is None
    with pytest.raises(ClientError) as e:
        pc.commit("T", 0, end + 10)
    assert e.value.code == d.ILLEGAL_OFFSET


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

"""PullConsumer (offsets, tags, long polling, commits) and SimpleConsumer (receive, ack,
invisibility, redelivery) against in-process nodes."""
from __future__ import annotations

import threading
import time

import pytest

from cluster.client import (ClientError, Message, Producer, PullConsumer, ReceivedMessage,
                            SimpleConsumer)
from proto.apache.rocketmq.v2 import definition_pb2 as d

from tests.support.nodes import settle


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


def test_pull_long_polling_wakes_on_a_send(nodes):
    node = nodes.start()
    conn = nodes.connect(node)
    [r] = fill(conn, "T", ["a"])
    settle(node)
    qid = queue_of(node, "T", r.message_id)
    pc = PullConsumer(conn, "G")
    later = threading.Timer(0.5, lambda: fill(conn, "T", ["a"]))
    later.start()
    try:
        t0 = time.monotonic()
        got = pc.pull("T", qid, 1, long_polling=10)
        waited = time.monotonic() - t0
    finally:
        later.join()
    assert got.found and [m.queue_offset for m in got.messages] == [1]
    assert 0.3 < waited < 8
    t0 = time.monotonic()
    assert pc.pull("T", qid, 2, long_polling=0.5).code == d.MESSAGE_NOT_FOUND
    assert time.monotonic() - t0 >= 0.25


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
def consumer_node(nodes):
    node = nodes.start(min_invisible_time_ms=500)
    return node, nodes.connect(node)


def test_receive_ack_and_filter(consumer_node):
    node, conn = consumer_node
    fill(conn, "T", ["a", "b", "a"], queue_group=None)
    settle(node)
    sc = SimpleConsumer(conn, "SG", {"T": "a"}, await_duration=1)
    got = sc.receive(16, invisible_duration=30)
    assert sorted(m.body for m in got) == [b"a-0", b"a-2"]
    assert all(m.receipt_handle and m.delivery_attempt == 1 and m.invisible_duration_ms == 30_000
               for m in got)
    assert sc.ack_many(got) == [None, None]
    t0 = time.monotonic()
    assert sc.receive(16, 30, await_duration=0.5) == []  # acked: nothing left for the group
    assert time.monotonic() - t0 >= 0.3
    with pytest.raises(ClientError) as e:
        sc.ack(got[0])  # already acked
    assert e.value.code == d.INVALID_RECEIPT_HANDLE
    other = SimpleConsumer(conn, "SG2", {"T": "*"}, await_duration=1)
    assert len(other.receive(16, 30)) == 3  # another group sees everything


def test_invisibility_and_redelivery(consumer_node):
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
    [third] = sc.receive(1, invisible_duration=30, await_duration=3)  # after 0.6 s it expired
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

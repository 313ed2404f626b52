"""PullConsumer against in-process nodes: queues, offsets by policy, tags, paging, long
polling (by the node's ManualClock: a poll in the background ends by a send or by advancing
the clock, long before the call's real deadline) and committed offsets."""
from __future__ import annotations

import time

import pytest

from cluster.client import ClientError, PullConsumer
from proto.apache.rocketmq.v2 import definition_pb2 as d
from tests.support.client import fill
from tests.support.nodes import settle
from tests.support.waiting import in_background, waiting_on


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

"""Admin.QueryMessages against a real in-process master and slave: by offset message id, by
client message id (UNIQ_KEY) with or without the topic, by key within a time range, by store
time range over all queues or one, bodies left out on request, and the argument checks."""
from __future__ import annotations

import grpc
import pytest

from proto import admin_pb2 as pb

from tests.support.nodes import settle

TOPIC = "Lookup"


def batch(start: int, n: int) -> list[pb.Message]:
    return [pb.Message(topic=TOPIC, queue_id=i % 3, keys=f"k-{i} shared", tags="t",
                       unique_key=f"UNIQ{i:04d}", body=f"body-{i}".encode())
            for i in range(start, start + n)]


@pytest.fixture(scope="module")
def cluster(pair):
    master, slave, m, s, clock = pair.master, pair.slave, pair.m, pair.s, pair.clock
    for b in range(3):  # three batches, stored 30 ms apart (each batch at one time)
        assert m.send(batch(b * 6, 6)).status == "PUT_OK"
        clock.advance(0.03)
    assert m.send([pb.Message(topic="Other", keys="k-1", unique_key="UNIQ-OTHER",
                              body=b"o")]).status == "PUT_OK"
    settle(master, slave)
    records = [msg for q in range(3) for msg in m.get(TOPIC, q, 0, 32).messages]
    return master, m, s, sorted(records, key=lambda r: r.commit_log_offset), clock


def test_by_offset_message_id(cluster):
    _, m, s, records, _ = cluster
    target = records[7]
    for c in (m, s):  # the slave holds the same bytes, so the same ids
        r = c.query("", msg_id=target.msg_id)
        assert r.status == "FOUND"
        assert [(x.commit_log_offset, x.body) for x in r.messages] == \
            [(target.commit_log_offset, b"body-7")]
        assert r.messages[0].unique_key == "UNIQ0007" and r.messages[0].body_size == 6
    assert m.query("", msg_id=target.msg_id.lower()).messages[0].unique_key == "UNIQ0007"
    # an id whose offset is not a record start, or beyond the log, finds nothing
    bad = target.msg_id[:-4] + f"{(target.commit_log_offset + 3) & 0xFFFF:04X}"
    assert m.query("", msg_id=bad).status == "NO_MATCHED_MESSAGE"
    assert m.query("", msg_id=target.msg_id[:16] + "7" * 16).messages == []


def test_by_client_message_id_with_and_without_topic(cluster):
    _, m, _, _, _ = cluster
    r = m.query(TOPIC, msg_id="UNIQ0011")
    assert [x.keys for x in r.messages] == ["k-11 shared"]
    everywhere = m.query("", msg_id="UNIQ-OTHER")  # searched in every topic's index
    assert [(x.topic, x.body) for x in everywhere.messages] == [("Other", b"o")]
    assert m.query("Other", msg_id="UNIQ0011").messages == []


def test_by_key_and_time_range(cluster):
    _, m, _, records, _ = cluster
    assert {x.topic for x in m.query(TOPIC, "k-1").messages} == {TOPIC}
    shared = m.query(TOPIC, "shared", max_count=100)
    assert len(shared.messages) == 18
    first, last = records[6].store_timestamp, records[11].store_timestamp
    middle = m.query(TOPIC, "shared", max_count=100, begin_ms=first, end_ms=last)
    assert sorted(x.body for x in middle.messages) == sorted(f"body-{i}".encode() for i in range(6, 12))


def test_by_time_range(cluster):
    _, m, s, records, clock = cluster
    begin, end = records[6].store_timestamp, records[11].store_timestamp
    r = m.query(TOPIC, begin_ms=begin, end_ms=end, max_count=100)
    assert [x.body for x in r.messages] == [f"body-{i}".encode() for i in range(6, 12)]
    assert not r.truncated
    assert [x.store_timestamp for x in r.messages] == sorted(x.store_timestamp for x in r.messages)
    one = s.query(TOPIC, begin_ms=begin, end_ms=end, queue_id=1, omit_body=True)
    assert [(x.queue_id, x.body, x.body_size) for x in one.messages] == [(1, b"", 6), (1, b"", 7)]
    first = m.query(TOPIC, begin_ms=begin, max_count=4)  # no end: up to now
    assert len(first.messages) == 4 and first.truncated
    assert [x.body for x in first.messages] == [f"body-{i}".encode() for i in range(6, 10)]
    upto = m.query(TOPIC, end_ms=records[5].store_timestamp, max_count=100)  # no begin
    assert len(upto.messages) == 6
    assert m.query(TOPIC, begin_ms=clock.now_ms() + 60_000).messages == []


@pytest.mark.parametrize("kwargs, text", [
    ({}, "give msg_id"), ({"key": "k-1"}, "needs the topic"),
    ({"begin_ms": 1}, "needs the topic"), ({"topic": TOPIC, "key": "k", "msg_id": "x"}, "not both"),
    ({"topic": TOPIC, "max_count": 5000, "key": "k"}, "max_count"),
    ({"topic": TOPIC, "begin_ms": 10, "end_ms": 5}, "time range"),
    ({"topic": TOPIC, "key": "k", "queue_id": 1}, "queue_id"),
    ({"topic": TOPIC, "begin_ms": 1, "queue_id": -1}, "negative")])
def test_bad_queries_are_refused(cluster, kwargs, text):
    _, m, _, _, _ = cluster
    topic = kwargs.pop("topic", "")
    key = kwargs.pop("key", "")
    with pytest.raises(grpc.RpcError) as e:
        m.query(topic, key, **kwargs)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and text in e.value.details()

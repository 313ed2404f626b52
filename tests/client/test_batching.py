"""BatchingProducer: many threads, coalesced requests, FIFO order per message group, a bad
message isolated from its batch, close() sending what is buffered."""
from __future__ import annotations

import threading

import pytest

from cluster.client import BatchingConfig, BatchingProducer, ClientError, Message
from proto.apache.rocketmq.v2 import definition_pb2 as d

from tests.support.client import read_all
from tests.support.nodes import settle


def test_many_threads_coalesced(nodes):
    node = nodes.start()
    conn = nodes.connect(node)
    threads, per_thread = 8, 400
    producer = BatchingProducer(conn, BatchingConfig(max_messages=128, max_in_flight=2))
    futures: list = [None] * threads
    start = threading.Barrier(threads)

    def run(t: int) -> None:
        start.wait()
        futures[t] = [producer.submit(Message("T", f"{t}-{i}".encode(), keys=f"k{t}-{i}"))
                      for i in range(per_thread)]

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    receipts = [f.result(30) for fs in futures for f in fs]
    producer.close()
    total = threads * per_thread
    assert len({r.message_id for r in receipts}) == total
    assert producer.requests < total / 8, producer.requests  # coalesced
    settle(node)
    got = read_all(conn, "T")
    assert sorted(m.body for m in got) == sorted(f"{t}-{i}".encode() for t in range(threads)
                                                 for i in range(per_thread))
    by_id = {m.message_id: m for m in got}
    for r in receipts:
        assert by_id[r.message_id].queue_offset == r.offset


def test_fifo_group_keeps_order(nodes):
    node = nodes.start()
    conn = nodes.connect(node)
    with BatchingProducer(conn, BatchingConfig(max_messages=16, max_in_flight=4)) as producer:
        futures = [producer.submit(Message("F", f"{i}".encode(), message_group="g1"))
                   for i in range(300)]
        futures += [producer.submit(Message("F", b"other", message_group="g2"))]
        offsets = [f.result(30).offset for f in futures[:300]]
    assert offsets == list(range(offsets[0], offsets[0] + 300))
    settle(node)
    g1 = [m for m in read_all(conn, "F") if m.message_group == "g1"]
    assert len({m.queue_id for m in g1}) == 1
    assert [m.body for m in sorted(g1, key=lambda m: m.queue_offset)] == \
        [f"{i}".encode() for i in range(300)]


def test_bad_message_is_isolated(nodes):
    node = nodes.start()
    conn = nodes.connect(node)
    config = BatchingConfig(linger_ms=200, max_in_flight=1)
    with BatchingProducer(conn, config) as producer:
        msgs = [Message("T", f"m{i}".encode()) for i in range(10)]
        msgs[4] = Message("T", b"bad", properties={"UNIQ_KEY": "reserved"})
        futures = [producer.submit(m) for m in msgs]
        results = []
        for f in futures:
            try:
                results.append(f.result(30))
            except ClientError as e:
                results.append(e)
        assert producer.requests == 1 + 10  # the refused batch, then each message alone
    assert isinstance(results[4], ClientError) and results[4].code == d.ILLEGAL_MESSAGE_PROPERTY_KEY
    assert all(not isinstance(r, Exception) for i, r in enumerate(results) if i != 4)
    settle(node)
    assert sorted(m.body for m in read_all(conn, "T")) == sorted(m.body for i, m in enumerate(msgs)
                                                                 if i != 4)


def test_refused_topic_fails_every_future(nodes):
    node = nodes.start()
    conn = nodes.connect(node)
    with BatchingProducer(conn, BatchingConfig(linger_ms=50)) as producer:
        futures = [producer.submit(Message("bad topic!", b"x")) for _ in range(5)]
        for f in futures:
            with pytest.raises(ClientError) as e:
                f.result(30)
            assert e.value.code == d.ILLEGAL_TOPIC
        assert producer.requests == 1  # a topic refusal is not split
    assert node.store.max_phy_offset() == 0


def test_close_sends_what_is_buffered(nodes):
    node = nodes.start()
    conn = nodes.connect(node)
    producer = BatchingProducer(conn, BatchingConfig(linger_ms=60_000, max_messages=1000))
    futures = [producer.submit(Message("T", b"late")) for _ in range(3)]
    assert not any(f.done() for f in futures)
    producer.close()
    assert [f.result(0).offset for f in futures] == [0, 1, 2]
    with pytest.raises(RuntimeError):
        producer.submit(Message("T", b"after close"))


def test_back_pressure(nodes):
    node = nodes.start()
    conn = nodes.connect(node)
    config = BatchingConfig(max_messages=4, max_buffered=8, linger_ms=0, max_in_flight=1)
    with BatchingProducer(conn, config) as producer:
        futures = [producer.submit(Message("T", b"x")) for _ in range(200)]
        assert producer.flush(30)
        assert all(f.done() for f in futures)
        assert producer.requests >= 200 / 4


def test_config_checks():
    for bad in ({"max_messages": 0}, {"linger_ms": -1}, {"max_in_flight": 0},
                {"max_messages": 10, "max_buffered": 5}):
        with pytest.raises(ValueError):
            BatchingConfig(**bad)

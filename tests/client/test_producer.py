"""Producer.send / send_batch against in-process nodes: receipts, one append per batch, the
error mapping (refusals write nothing) and the retry rule (only answers that stored nothing)."""
from __future__ import annotations

import threading
import time

import pytest

from cluster.client import ClientError, Message, Producer, RetryPolicy
from cluster.client.producer import NO_RETRY
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from tests.support.client import read_all
from tests.support.nodes import settle


def test_send_one_message(nodes):
    node = nodes.start()
    conn = nodes.connect(node)
    receipt = Producer(conn, ["T"]).send(Message("T", b"hello", tag="a", keys=["k1", "k2"],
                                                 properties={"color": "red"}))
    assert receipt.offset == 0 and len(receipt.message_id) == 34
    settle(node)
    [m] = read_all(conn, "T")
    assert (m.message_id, m.body, m.tag, m.keys, m.properties) == \
        (receipt.message_id, b"hello", "a", ("k1", "k2"), {"color": "red"})
    assert abs(m.born_timestamp_ms - time.time() * 1000) < 60_000 and m.born_host == "127.0.0.1"


def test_send_batch_is_one_append(nodes):
    node = nodes.start()
    conn = nodes.connect(node)
    producer = Producer(conn)
    producer.send(Message("T", b"first"))
    msgs = [Message("T", f"m{i}".encode(), keys=f"k{i}") for i in range(50)]
    receipts = producer.send_batch(msgs)
    assert [r.message_id for r in receipts] == [m.message_id for m in msgs]
    assert [r.offset for r in receipts] == list(range(receipts[0].offset, receipts[0].offset + 50))
    settle(node)
    got = [m for m in read_all(conn, "T") if m.body != b"first"]
    assert len({m.queue_id for m in got}) == 1  # one request, one queue
    assert [m.body for m in sorted(got, key=lambda m: m.queue_offset)] == [m.body for m in msgs]
    with pytest.raises(ValueError):
        producer.send_batch([Message("T", b"x"), Message("U", b"y")])


def test_refusals_are_typed_and_write_nothing(nodes):
    node = nodes.start()
    conn = nodes.connect(node)
    producer = Producer(conn)
    producer.send(Message("T", b"warm-up"))
    before = node.store.max_phy_offset()
    cases = [
        ([Message("bad topic!", b"x")], d.ILLEGAL_TOPIC),
        ([Message("T", b"x", tag="a|b")], d.ILLEGAL_MESSAGE_TAG),
        ([Message("T", b"x", properties={"KEYS": "v"})], d.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ([Message("T", b"x" * (256 * 1024 + 1))], d.MESSAGE_BODY_TOO_LARGE),
        ([Message("T", b"ok"), Message("T", b"x", tag=" ")], d.ILLEGAL_MESSAGE_TAG),  # whole batch
    ]
    for msgs, code in cases:
        with pytest.raises(ClientError) as e:
            producer.send_batch(msgs)
        assert e.value.code == code, e.value
        assert e.value.code_name == d.Code.Name(code) and e.value.message
    with pytest.raises(ClientError) as e:  # an empty body is sent as is: the server refuses it
        producer.send(Message("T", b""))
    assert e.value.code == d.MESSAGE_BODY_EMPTY
    assert node.store.max_phy_offset() == before


def test_refused_before_writing_is_retried(nodes):
    """SYNC_MASTER with minInSyncReplicas=2 and no slave refuses puts (HA_NOT_AVAILABLE, no
    entries: nothing stored). Without retries that is the answer; with them the send goes
    through once a slave joins."""
    master = nodes.start(role="SYNC_MASTER", store={"min_in_sync_replicas": 2})
    conn = nodes.connect(master)
    with pytest.raises(ClientError) as e:
        Producer(conn, retry=NO_RETRY).send(Message("T", b"refused"))
    assert e.value.code == d.HA_NOT_AVAILABLE and master.store.max_phy_offset() == 0
    starter = threading.Timer(0.3, lambda: nodes.start("slave", role="SLAVE", broker_id=1,
                                                       master_address=master.address))
    starter.start()
    try:
        patient = RetryPolicy(max_attempts=100, initial_backoff=0.05, max_backoff=0.2)
        receipt = Producer(conn, retry=patient).send(Message("T", b"accepted"), timeout=5)
    finally:
        starter.join()
    assert receipt.offset == 0
    settle(master)
    assert [m.body for m in read_all(conn, "T")] == [b"accepted"]


def test_retry_rule():
    policy = RetryPolicy(max_attempts=3)
    refused = s.SendMessageResponse(status=d.Status(code=d.HA_NOT_AVAILABLE))
    stored = s.SendMessageResponse(status=d.Status(code=d.HA_NOT_AVAILABLE),
                                   entries=[s.SendResultEntry(message_id="x")])
    assert policy.should_retry(refused, 1) and policy.should_retry(refused, 2)
    assert not policy.should_retry(refused, 3)  # attempts used up
    assert not policy.should_retry(stored, 1)  # stored: never resent
    for code in (d.SLAVE_PERSISTENCE_TIMEOUT, d.MASTER_PERSISTENCE_TIMEOUT, d.ILLEGAL_TOPIC,
                 d.PROXY_TIMEOUT, d.INTERNAL_ERROR):
        assert not policy.should_retry(s.SendMessageResponse(status=d.Status(code=code)), 1)
    assert policy.backoff(1) == 0.05 and policy.backoff(10) == 1.0
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)

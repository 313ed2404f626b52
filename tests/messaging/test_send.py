"""The master's Sender without a server: the queue a batch goes to, nothing written on a
refusal, and the put's outcome as the client's status."""
from __future__ import annotations

import asyncio
import dataclasses

import pytest

from cluster.messaging.send import Sender
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.json_config import PERM_READ
from store.put_result import AppendResult, PutResult, PutStatus

from tests.support.v2 import ILLEGAL, LIMITS, NOW, msg, topic_registry


class FakePut:
    def __init__(self, status=PutStatus.PUT_OK):
        self.calls = []
        self.status = status

    async def __call__(self, msgs):
        self.calls.append(list(msgs))
        appends = tuple(AppendResult(i * 100, 100, 10 + i, NOW, "X") for i in range(len(msgs)))
        return PutResult(self.status, appends if self.status.stored else (), "why")


def sent(snd: Sender, request: s.SendMessageRequest, **kwargs) -> s.SendMessageResponse:
    """Sender.send on an event loop of this thread, to its answer."""
    return asyncio.run(snd.send(request, **kwargs))


def sender(leader, put, auto_create=True) -> Sender:
    return Sender(put, topic_registry(leader, auto_create=auto_create), lambda: LIMITS, lambda: NOW)


@pytest.mark.parametrize("what, msgs, code", ILLEGAL, ids=[i[0] for i in ILLEGAL])
def test_refused_requests_write_nothing(leader, what, msgs, code):
    put = FakePut()
    r = sent(sender(leader, put), s.SendMessageRequest(messages=msgs))
    assert r.status.code == code and not r.entries
    assert put.calls == []


def test_unknown_topic_and_batch_size_refusals_write_nothing(leader):
    put = FakePut()
    r = sent(sender(leader, put, auto_create=False), s.SendMessageRequest(messages=[msg()]))
    assert r.status.code == d.TOPIC_NOT_FOUND
    big = [msg(body=b"x" * 600, message_id="a"), msg(body=b"x" * 600, message_id="b")]
    snd = sender(leader, put)
    r = sent(snd, s.SendMessageRequest(messages=big))
    assert r.status.code == d.PAYLOAD_TOO_LARGE
    snd.topics.table.update("T", lambda c: dataclasses.replace(c, perm=PERM_READ))
    ro = Sender(put, snd.topics, lambda: LIMITS, lambda: NOW)
    assert sent(ro, s.SendMessageRequest(messages=[msg()])).status.code == d.FORBIDDEN
    assert put.calls == []


def test_a_batch_is_one_put_on_one_queue(leader):
    put = FakePut()
    snd = sender(leader, put)
    r = sent(snd, s.SendMessageRequest(messages=[msg(message_id=f"m{i}") for i in range(3)]))
    assert r.status.code == d.OK and len(put.calls) == 1
    assert len({m.queue_id for m in put.calls[0]}) == 1
    assert [(e.message_id, e.offset, e.status.code) for e in r.entries] == [
        ("m0", 10, d.OK), ("m1", 11, d.OK), ("m2", 12, d.OK)]
    queues = [put.calls[-1][0].queue_id]
    for _ in range(7):  # round-robin over the 4 queues
        sent(snd, s.SendMessageRequest(messages=[msg()]))
        queues.append(put.calls[-1][0].queue_id)
    assert sorted(set(queues)) == [0, 1, 2, 3]


def test_a_message_group_always_takes_the_same_queue(leader):
    put = FakePut()
    snd = sender(leader, put)
    for _ in range(5):
        sent(snd, s.SendMessageRequest(messages=[msg(message_type=d.FIFO, message_group="order-7")]))
    assert len({c[0].queue_id for c in put.calls}) == 1


@pytest.mark.parametrize("status, code", [(PutStatus.FLUSH_DISK_TIMEOUT, d.MASTER_PERSISTENCE_TIMEOUT),
                                          (PutStatus.SERVICE_NOT_AVAILABLE, d.INTERNAL_SERVER_ERROR),
                                          (PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, d.HA_NOT_AVAILABLE)])
def test_put_outcomes_reach_the_client(leader, status, code):
    r = sent(sender(leader, FakePut(status)), s.SendMessageRequest(messages=[msg()]))
    assert r.status.code == code and "why" in r.status.message
    assert len(r.entries) == (1 if status.stored else 0)


def test_a_refusing_store_is_logged_once_per_client_and_reason(leader, caplog):
    snd = sender(leader, FakePut(PutStatus.SERVICE_NOT_AVAILABLE))
    with caplog.at_level("WARNING", logger="cluster.messaging.send"):
        for _ in range(5):
            sent(snd, s.SendMessageRequest(messages=[msg()]), peer_ip="10.0.0.7")
        sent(snd, s.SendMessageRequest(messages=[msg()]), peer_ip="10.0.0.8")
    lines = [r.getMessage() for r in caplog.records if "refused SendMessage" in r.getMessage()]
    assert len(lines) == 2 and "SERVICE_NOT_AVAILABLE: why" in lines[0]
    assert snd.refusals.refusals == 6

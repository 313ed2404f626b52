"""Routes (topic table, auto-create, queues, endpoints), the master's Sender (queue choice, nothing
written on a refusal), telemetry settings and request signatures, without a server."""
from __future__ import annotations

import json

import pytest
from google.protobuf.duration_pb2 import Duration

from cluster.messaging import request_signature, telemetry
from cluster.messaging.route import (ACCEPTED_MESSAGE_TYPES, TopicDefaults, TopicRegistry,
                                     config_from_route, endpoints, message_queues)
from cluster.messaging.send import Sender
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.json_config import PERM_READ, TopicConfig, TopicConfigTable
from store.layout import CONFIG_DIR, TOPICS_FILE
from store.put_result import AppendResult, PutResult, PutStatus

from .test_convert import ILLEGAL, LIMITS, NOW, v2


def registry(tmp_path, auto_create=True, n=4) -> TopicRegistry:
    r = TopicRegistry(TopicConfigTable.for_store(str(tmp_path)),
                      lambda: TopicDefaults(auto_create, n))
    r.load()
    return r


def test_auto_create_persists_the_topic(tmp_path):
    r = registry(tmp_path, n=4)
    config = r.get_or_create("Orders")
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (4, 4, 6)
    saved = json.loads((tmp_path / CONFIG_DIR / TOPICS_FILE).read_text())
    assert saved["topicConfigTable"]["Orders"]["writeQueueNums"] == 4
    assert registry(tmp_path).get("Orders") == config  # a restart still knows it


def test_unknown_topic_without_auto_create(tmp_path):
    r = registry(tmp_path, auto_create=False)
    from cluster.messaging.v2_status import V2Error
    with pytest.raises(V2Error) as e:
        r.get_or_create("Orders")
    assert e.value.code == d.TOPIC_NOT_FOUND
    assert not (tmp_path / CONFIG_DIR / TOPICS_FILE).exists()


def test_message_queues_of_a_route():
    config = TopicConfig(topic_name="T", read_queue_nums=4, write_queue_nums=2)
    eps = endpoints(["127.0.0.1:10921", "127.0.0.1:10911", "127.0.0.1:10921"])
    assert eps.scheme == d.IPv4
    assert [(a.host, a.port) for a in eps.addresses] == [("127.0.0.1", 10921), ("127.0.0.1", 10911)]
    queues = message_queues(d.Resource(name="T"), config, "broker-a", eps)
    assert [q.id for q in queues] == [0, 1, 2, 3]
    assert [q.permission for q in queues] == [d.READ_WRITE, d.READ_WRITE, d.READ, d.READ]
    for q in queues:
        assert (q.broker.name, q.broker.id) == ("broker-a", 0)
        assert q.broker.endpoints == eps and q.topic.name == "T"
        assert tuple(q.accept_message_types) == ACCEPTED_MESSAGE_TYPES
    assert config_from_route("T", queues) == config
    read_only = TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2, perm=PERM_READ)
    again = message_queues(d.Resource(name="T"), read_only, "b", eps)
    assert {q.permission for q in again} == {d.READ}
    assert config_from_route("T", again) == read_only


class FakePut:
    def __init__(self, status=PutStatus.PUT_OK):
        self.calls = []
        self.status = status

    def __call__(self, msgs):
        self.calls.append(list(msgs))
        appends = tuple(AppendResult(i * 100, 100, 10 + i, NOW, "X") for i in range(len(msgs)))
        return PutResult(self.status, appends if self.status.stored else (), "why")


def sender(tmp_path, put, auto_create=True) -> Sender:
    return Sender(put, registry(tmp_path, auto_create=auto_create), lambda: LIMITS, lambda: NOW)


@pytest.mark.parametrize("what, msgs, code", ILLEGAL, ids=[i[0] for i in ILLEGAL])
def test_refused_requests_write_nothing(tmp_path, what, msgs, code):
    put = FakePut()
    r = sender(tmp_path, put).send(s.SendMessageRequest(messages=msgs))
    assert r.status.code == code and not r.entries
    assert put.calls == []


def test_unknown_topic_and_batch_size_refusals_write_nothing(tmp_path):
    put = FakePut()
    r = sender(tmp_path, put, auto_create=False).send(s.SendMessageRequest(messages=[v2()]))
    assert r.status.code == d.TOPIC_NOT_FOUND
    big = [v2(body=b"x" * 600, message_id="a"), v2(body=b"x" * 600, message_id="b")]
    r = sender(tmp_path, put).send(s.SendMessageRequest(messages=big))
    assert r.status.code == d.PAYLOAD_TOO_LARGE
    table = TopicConfigTable.for_store(str(tmp_path / "ro"))
    table.put(TopicConfig(topic_name="T", perm=PERM_READ))
    ro = Sender(put, TopicRegistry(table),
                lambda: LIMITS, lambda: NOW)
    assert ro.send(s.SendMessageRequest(messages=[v2()])).status.code == d.FORBIDDEN
    assert put.calls == []


def test_a_batch_is_one_put_on_one_queue(tmp_path):
    put = FakePut()
    snd = sender(tmp_path, put)
    r = snd.send(s.SendMessageRequest(messages=[v2(message_id=f"m{i}") for i in range(3)]))
    assert r.status.code == d.OK and len(put.calls) == 1
    assert len({m.queue_id for m in put.calls[0]}) == 1
    assert [(e.message_id, e.offset, e.status.code) for e in r.entries] == [
        ("m0", 10, d.OK), ("m1", 11, d.OK), ("m2", 12, d.OK)]
    queues = [put.calls[-1][0].queue_id]
    for _ in range(7):  # round-robin over the 4 queues
        snd.send(s.SendMessageRequest(messages=[v2()]))
        queues.append(put.calls[-1][0].queue_id)
    assert sorted(set(queues)) == [0, 1, 2, 3]


def test_a_message_group_always_takes_the_same_queue(tmp_path):
    put = FakePut()
    snd = sender(tmp_path, put)
    for _ in range(5):
        snd.send(s.SendMessageRequest(messages=[v2(message_type=d.FIFO, message_group="order-7")]))
    assert len({c[0].queue_id for c in put.calls}) == 1


@pytest.mark.parametrize("status, code", [(PutStatus.FLUSH_DISK_TIMEOUT, d.MASTER_PERSISTENCE_TIMEOUT),
                                          (PutStatus.SERVICE_NOT_AVAILABLE, d.INTERNAL_SERVER_ERROR),
                                          (PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, d.HA_NOT_AVAILABLE)])
def test_put_outcomes_reach_the_client(tmp_path, status, code):
    r = sender(tmp_path, FakePut(status)).send(s.SendMessageRequest(messages=[v2()]))
    assert r.status.code == code and "why" in r.status.message
    assert len(r.entries) == (1 if status.stored else 0)


# -- telemetry ------------------------------------------------------------------------------------
def test_publishing_settings_get_the_max_body_size():
    client = d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(
        topics=[d.Resource(name="T")], validate_message_type=True),
        request_timeout=Duration(seconds=3))
    reply = telemetry.settings_reply(client, 4 * 1024 * 1024)
    assert reply.status.code == d.OK
    assert reply.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert reply.settings.publishing.topics[0].name == "T" and reply.settings.publishing.validate_message_type
    assert reply.settings.client_type == d.PRODUCER and reply.settings.request_timeout.seconds == 3


def test_subscription_settings_get_defaults():
    client = d.Settings(client_type=d.SIMPLE_CONSUMER,
                        subscription=d.Subscription(group=d.Resource(name="G")))
    sub = telemetry.settings_reply(client, 1).settings.subscription
    assert (sub.group.name, sub.receive_batch_size, sub.long_polling_timeout.seconds, sub.fifo) == (
        "G", 32, 20, False)


def test_only_settings_are_answered():
    commands = [s.TelemetryCommand(thread_stack_trace=s.ThreadStackTrace(nonce="n")),
                s.TelemetryCommand(settings=d.Settings(client_type=d.PRODUCER, publishing=d.Publishing()))]
    out = list(telemetry.replies(iter(commands), 100))
    assert len(out) == 1 and out[0].settings.publishing.max_body_size == 100


def test_stream_budget():
    b = telemetry.StreamBudget(2)
    assert b.try_acquire() and b.try_acquire() and not b.try_acquire()
    b.release()
    assert b.try_acquire() and b.open == 2


# -- signatures -----------------------------------------------------------------------------------
def test_signatures_like_the_official_clients():
    md = request_signature.sign("ak", "sk")
    assert request_signature.check(md, "ak", "sk") is None
    assert request_signature.check(md, "", "") is None  # not configured: nothing checked
    assert "signature" in request_signature.check(md, "ak", "other")
    intruder = request_signature.sign("intruder", "sk")
    assert "access key" in request_signature.check(intruder, "ak", "sk")
    assert "missing" in request_signature.check([], "ak", "sk")
    date = dict(md)["x-mq-date-time"]
    # what the Python client sends (its signature: hex HMAC-SHA1 of the date with the secret)
    official = [("x-mq-date-time", date), ("authorization",
                f"MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, "
                f"Signature={request_signature.signature('sk', date)}")]
    assert request_signature.check(official, "ak", "sk") is None
    bearer = [("x-mq-date-time", date), ("authorization", "Bearer x")]
    assert request_signature.check(bearer, "ak", "sk")

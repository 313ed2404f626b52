"""MessagingService over gRPC against in-process nodes on 127.0.0.1 (our generated stubs)."""
from __future__ import annotations

import gzip
import json
import os
import time
import zlib

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster.security import signature as auth
from cluster.messaging.send import FORWARDED_HEADER
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.layout import CONFIG_DIR, TOPICS_FILE
from tests.support.streams import Outbox
from tests.support.v2 import msg, pull, query_offset, route
from tests.support.waiting import in_background, wait_until, waiting_on

def test_route_health_and_auto_created_topic(nodes):
    node = nodes.start()
    stub = nodes.stub(node)
    with grpc.insecure_channel(node.address) as ch:
        health = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service="apache.rocketmq.v2.MessagingService"), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    r = route(stub, "Orders")
    assert r.status.code == d.OK
    assert [q.id for q in r.message_queues] == [0, 1, 2, 3]
    q = r.message_queues[0]
    assert (q.broker.name, q.broker.id, q.permission) == ("broker-a", 0, d.READ_WRITE)
    assert list(q.accept_message_types) == [d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION]
    assert q.broker.endpoints.scheme == d.IPv4
    assert [f"{a.host}:{a.port}" for a in q.broker.endpoints.addresses] == [node.address]
    path = os.path.join(node.config.store.store_path_root_dir, CONFIG_DIR, TOPICS_FILE)
    wait_until(lambda: os.path.exists(path), 10, "the topics.json view")  # the table service
    with open(path) as f:
        assert json.load(f)["topicConfigTable"]["Orders"]["readQueueNums"] == 4
    assert route(stub, "bad topic").status.code == d.ILLEGAL_TOPIC
    assert route(stub, "RMQ_SYS_TRANS_HALF_TOPIC").status.code == d.ILLEGAL_TOPIC


def test_advertised_and_group_addresses(nodes):
    node = nodes.start(advertised_address="10.0.0.5:9876", group_addresses=("10.0.0.6:9876",),
                 default_topic_queue_nums=2)
    r = route(nodes.stub(node))
    eps = r.message_queues[0].broker.endpoints
    assert [f"{a.host}:{a.port}" for a in eps.addresses] == ["10.0.0.6:9876", "10.0.0.5:9876"]
    assert len(r.message_queues) == 2


def test_without_auto_create_unknown_topics_are_not_found(nodes):
    node = nodes.start(auto_create_topic_enable=False)
    stub = nodes.stub(node)
    assert route(stub).status.code == d.TOPIC_NOT_FOUND
    assert stub.SendMessage(s.SendMessageRequest(messages=[msg()]), timeout=5).status.code == d.TOPIC_NOT_FOUND
    assert pull(stub, "T", 0, 0)[0].code == d.TOPIC_NOT_FOUND
    assert node.store.max_phy_offset() == 0


def test_send_then_pull_and_query_offsets(nodes):
    node = nodes.start()
    stub = nodes.stub(node)
    before = node.clock.now_ms()
    one = stub.SendMessage(s.SendMessageRequest(messages=[msg(
        tag="TagA", keys=["k1", "k2"], user={"color": "red"}, message_id="01AA",
        born_timestamp=Timestamp(seconds=1_700_000_000), born_host="10.1.1.1")]), timeout=5)
    assert one.status.code == d.OK, one.status
    assert [(e.message_id, e.status.code, e.transaction_id) for e in one.entries] == [("01AA", d.OK, "")]
    batch = stub.SendMessage(s.SendMessageRequest(messages=[
        msg(tag="TagB" if i % 2 else "TagA", message_id=f"01B{i}",
            body=gzip.compress(b"z" * 50) if i == 2 else b"b%d" % i,
            body_encoding=d.GZIP if i == 2 else d.IDENTITY) for i in range(4)]), timeout=5)
    assert batch.status.code == d.OK and len(batch.entries) == 4
    offsets = [e.offset for e in batch.entries]
    assert offsets == list(range(offsets[0], offsets[0] + 4))  # one append, one queue
    ends = lambda: [query_offset(stub, "T", q, d.END) for q in range(4)]  # noqa: E731
    wait_until(lambda: sum(ends()) == 5, timeout=5, what="both requests dispatched")
    queue_id = ends().index(offsets[-1] + 1)
    status, got, next_offset = pull(stub, "T", queue_id, offsets[0])
    assert status.code == d.OK and next_offset == offsets[-1] + 1
    assert [m.system_properties.message_id for m in got] == [f"01B{i}" for i in range(4)]
    assert got[2].body == b"z" * 50  # stored and delivered decompressed
    for m in got:
        sp = m.system_properties
        assert sp.body_encoding == d.IDENTITY and sp.queue_id == queue_id
        assert sp.body_digest.checksum == f"{zlib.crc32(m.body):08X}"
        assert sp.store_timestamp.ToMilliseconds() >= before and sp.store_host == node.address
        assert sp.delivery_attempt == 1 and sp.message_type == d.NORMAL
    status, tagged, _ = pull(stub, "T", queue_id, offsets[0], tags="TagB")
    assert [m.system_properties.tag for m in tagged] == ["TagB", "TagB"]
    # the single message, wherever it went
    first_queue = next(q for q in range(4) if pull(stub, "T", q, 0)[1] and
                       pull(stub, "T", q, 0)[1][0].system_properties.message_id == "01AA")
    m = pull(stub, "T", first_queue, 0)[1][0]
    assert (m.system_properties.tag, list(m.system_properties.keys)) == ("TagA", ["k1", "k2"])
    assert dict(m.user_properties) == {"color": "red"} and m.system_properties.born_host == "10.1.1.1"
    assert m.system_properties.born_timestamp.seconds == 1_700_000_000
    # offsets by policy
    assert query_offset(stub, "T", queue_id, d.BEGINNING) == 0
    assert query_offset(stub, "T", queue_id, d.TIMESTAMP, before) <= offsets[0]
    assert query_offset(stub, "T", queue_id, d.TIMESTAMP, node.clock.now_ms() + 60_000) == offsets[-1] + 1
    # beyond the end / at the end
    status, got, next_offset = pull(stub, "T", queue_id, offsets[-1] + 1)
    assert (status.code, got, next_offset) == (d.MESSAGE_NOT_FOUND, [], offsets[-1] + 1)
    status, _, next_offset = pull(stub, "T", queue_id, offsets[-1] + 50)
    assert (status.code, next_offset) == (d.ILLEGAL_OFFSET, offsets[-1] + 1)


def test_long_polling_pull_wakes_on_a_send(nodes, clock):
    node = nodes.start(default_topic_queue_nums=1, clock=clock)
    stub = nodes.stub(node)
    assert route(stub).status.code == d.OK
    # 8 s of the node's clock, which never moves here; the call's deadline is 30 real seconds
    poll = in_background(lambda: pull(stub, "T", 0, 0, wait=8.0, timeout=30))
    waiting_on(clock)
    assert not poll.done()
    assert stub.SendMessage(s.SendMessageRequest(messages=[msg(message_id="01LP")]), timeout=5).status.code == d.OK
    status, got, next_offset = poll.result(timeout=10)  # woken by the dispatch
    assert status.code == d.OK and [m.system_properties.message_id for m in got] == ["01LP"]
    assert next_offset == 1


def test_refused_sends_write_nothing(nodes):
    node = nodes.start(store=dict(max_message_size=64 * 1024))
    stub = nodes.stub(node)
    assert stub.SendMessage(s.SendMessageRequest(messages=[msg()]), timeout=5).status.code == d.OK
    end = node.store.max_phy_offset()
    cases = [([msg(tag="a|b")], d.ILLEGAL_MESSAGE_TAG), ([msg(keys=[" "])], d.ILLEGAL_MESSAGE_KEY),
             ([msg(topic="a b")], d.ILLEGAL_TOPIC), ([msg(user={"KEYS": "x"})], d.ILLEGAL_MESSAGE_PROPERTY_KEY),
             ([msg(body=b"x" * (64 * 1024 + 1))], d.MESSAGE_BODY_TOO_LARGE),
             ([msg(body=b"")], d.MESSAGE_BODY_EMPTY),
             ([msg(user={"p": "v" * 17000})], d.MESSAGE_PROPERTIES_TOO_LARGE),
             ([msg(), msg(tag="a|b")], d.ILLEGAL_MESSAGE_TAG),
             ([msg(message_type=d.TRANSACTION), msg(message_type=d.TRANSACTION)], d.BAD_REQUEST),
             ([msg(delivery_timestamp=Timestamp(seconds=int(time.time()) + 10 * 86400))],
              d.ILLEGAL_DELIVERY_TIME),
             ([], d.MESSAGE_CORRUPTED)]
    for messages, code in cases:
        r = stub.SendMessage(s.SendMessageRequest(messages=messages), timeout=5)
        assert r.status.code == code, (code, r.status)
        assert not r.entries
    assert node.store.max_phy_offset() == end


def test_properties_over_max_properties_size_are_refused_whole(nodes):
    """The encoded properties (with the ones the node adds: UNIQ_KEY, __BORNHOST) are checked
    against maxPropertiesSize where the store encodes them, for every message of the batch
    before any is written."""
    node = nodes.start(store=dict(max_properties_size=200))
    stub = nodes.stub(node)
    assert stub.SendMessage(s.SendMessageRequest(messages=[msg()]), timeout=5).status.code == d.OK
    end = node.store.max_phy_offset()
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg(), msg(user={"p": "v" * 150})]),
                         timeout=5)
    assert r.status.code == d.MESSAGE_PROPERTIES_TOO_LARGE, r.status
    assert "maxPropertiesSize 200" in r.status.message and not r.entries
    assert node.store.max_phy_offset() == end


def test_delay_message_with_the_clients_millisecond_bug(nodes):
    node = nodes.start(default_topic_queue_nums=1)
    stub = nodes.stub(node)
    at_ms = int(time.time() * 1000) + 500
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg(
        message_type=d.DELAY, delivery_timestamp=Timestamp(seconds=at_ms), message_id="01DL")]), timeout=5)
    assert r.status.code == d.OK, r.status
    assert pull(stub, "T", 0, 0)[0].code == d.MESSAGE_NOT_FOUND  # held by the schedule service
    wait_until(lambda: pull(stub, "T", 0, 0)[1], timeout=10, what="the delayed message")
    m = pull(stub, "T", 0, 0)[1][0]
    assert m.system_properties.message_id == "01DL" and node.clock.now_ms() >= at_ms


NOT_IMPLEMENTED = [
    ("RecallMessage", s.RecallMessageRequest()),
    ("SyncLiteSubscription", s.SyncLiteSubscriptionRequest()),
]


def test_the_rest_answers_not_implemented(nodes):
    stub = nodes.stub(nodes.start())
    for name, request in NOT_IMPLEMENTED:
        r = getattr(stub, name)(request, timeout=5)
        assert r.status.code == d.NOT_IMPLEMENTED == 50100, name
        assert "not implemented" in r.status.message, name
    items = list(stub.ReceiveMessage(s.ReceiveMessageRequest(), timeout=5))
    assert len(items) == 1 and items[0].status.code == d.ILLEGAL_CONSUMER_GROUP
    for name, request in [("AckMessage", s.AckMessageRequest()),
                          ("ChangeInvisibleDuration", s.ChangeInvisibleDurationRequest()),
                          ("UpdateOffset", s.UpdateOffsetRequest()),
                          ("GetOffset", s.GetOffsetRequest()),
                          ("ForwardMessageToDeadLetterQueue",
                           s.ForwardMessageToDeadLetterQueueRequest())]:
        assert getattr(stub, name)(request, timeout=5).status.code == d.ILLEGAL_CONSUMER_GROUP, name
    assert stub.QueryAssignment(s.QueryAssignmentRequest(), timeout=5).status.code == d.ILLEGAL_TOPIC
    ok = d.Status(code=d.OK, message="OK")
    assert stub.Heartbeat(s.HeartbeatRequest(client_type=d.PRODUCER), timeout=5).status == ok
    assert stub.NotifyClientTermination(s.NotifyClientTerminationRequest(), timeout=5).status == ok


def test_telemetry_echoes_settings_and_stays_open(nodes):
    node = nodes.start()
    stub = nodes.stub(node)
    requests = Outbox()
    call = stub.Telemetry(iter(requests), timeout=20)
    settings = d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(topics=[d.Resource(name="T")]))
    requests.put(s.TelemetryCommand(settings=settings))
    first = next(call)
    assert first.status.code == d.OK
    assert first.settings.publishing.max_body_size == node.config.store.max_message_size
    assert node.messaging.telemetry.budget.open == 1
    requests.put(s.TelemetryCommand(settings=settings))  # the same stream answers again
    assert next(call).settings.publishing.topics[0].name == "T"
    requests.close()
    assert list(call) == []
    wait_until(lambda: node.messaging.telemetry.budget.open == 0, timeout=5, what="the stream to be released")


def test_request_signatures(nodes):
    node = nodes.start(access_key="AK", secret_key="SK")
    stub = nodes.stub(node)
    assert route(stub).status.code == d.UNAUTHORIZED
    assert route(stub, metadata=auth.sign("AK", "wrong")).status.code == d.UNAUTHORIZED
    assert route(stub, metadata=auth.sign("AK", "SK")).status.code == d.OK
    end = node.store.max_phy_offset()  # the topic record of T
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg()]), timeout=5)
    assert r.status.code == d.UNAUTHORIZED and node.store.max_phy_offset() == end
    items = list(stub.PullMessage(s.PullMessageRequest(), timeout=5))
    assert items[0].status.code == d.UNAUTHORIZED
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg()]), timeout=5,
                         metadata=auth.sign("AK", "SK"))
    assert r.status.code == d.OK


def test_a_slave_forwards_writes_and_serves_reads(nodes):
    master = nodes.start("master", role="SYNC_MASTER", access_key="AK", secret_key="SK")
    slave = nodes.slave(master, access_key="AK", secret_key="SK")
    stub = nodes.stub(slave)
    md = auth.sign("AK", "SK")
    r = route(stub, "Fwd", metadata=md)  # created on the master, replicated to the slave
    assert r.status.code == d.OK
    assert sorted(f"{a.host}:{a.port}" for a in r.message_queues[0].broker.endpoints.addresses) == \
        sorted([slave.address, master.address])
    assert master.messaging.topics.get("Fwd") is not None
    wait_until(lambda: slave.messaging.topics.get("Fwd") == master.messaging.topics.get("Fwd"),
               10, "the topic record confirmed and applied on the slave")
    sent = stub.SendMessage(s.SendMessageRequest(messages=[
        msg("Fwd", message_id=f"01F{i}", keys=[f"fk{i}"]) for i in range(3)]), timeout=10, metadata=md)
    assert sent.status.code == d.OK, sent.status
    assert [e.message_id for e in sent.entries] == ["01F0", "01F1", "01F2"]
    wait_until(lambda: master.store.query_messages("Fwd", "fk1"), timeout=5,
               what="the message indexed on the master")
    queue_id = next(q for q in range(4) if master.store.max_offset_in_queue("Fwd", q) == 3)
    wait_until(lambda: len(_pull_signed(stub, "Fwd", queue_id, md)) == 3, timeout=10,
               what="the slave to serve the messages")
    # a forwarded write that reaches a slave is refused, never forwarded again
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg("Fwd")]), timeout=5,
                         metadata=[*md, (FORWARDED_HEADER, "1")])
    assert r.status.code == d.INTERNAL_SERVER_ERROR and "never forwarded again" in r.status.message


def _pull_signed(stub, topic, queue_id, md):
    req = s.PullMessageRequest(message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=queue_id),
                               offset=0, batch_size=32)
    items = list(stub.PullMessage(req, timeout=5, metadata=md))
    return [i.message for i in items if i.WhichOneof("content") == "message"]


def test_a_slave_without_its_master_answers_routes_it_knows(nodes):
    master = nodes.start("master")
    slave = nodes.start("slave", role="SLAVE", broker_id=1, master_address=master.address)
    stub = nodes.stub(slave)
    assert route(stub, "Known").status.code == d.OK
    wait_until(lambda: slave.messaging.topics.get("Known") is not None, 10,
               "the topic record confirmed and applied on the slave")
    nodes.stop(master)
    assert route(stub, "Known").status.code == d.OK  # from its own replicated table
    assert route(stub, "Unknown").status.code in (d.INTERNAL_SERVER_ERROR, d.PROXY_TIMEOUT)
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg("Known")]), timeout=5)
    assert r.status.code in (d.INTERNAL_SERVER_ERROR, d.PROXY_TIMEOUT) and not r.entries

"""Access control on real nodes (in-process, gRPC on 127.0.0.1, our generated stubs): each
MessagingService method's permission, UNAUTHORIZED vs FORBIDDEN answers naming user, permission
and resource, nothing written when refused, a reload without restart, a slave forwarding the
caller's identity, and admin users on the Admin API."""
from __future__ import annotations

import time

import grpc
import pytest

from cluster.security.access import AclConfig
from cluster.security.signature import sign
from proto import admin_pb2 as apb
from proto import admin_pb2_grpc as apb_grpc
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from common.clock import ManualClock
from tests.support.streams import Outbox
from tests.support.v2 import duration, mq, msg, route
from tests.support.waiting import wait_until
from tests.support.files import replace_file

ACL = """\
accounts:
  - accessKey: producer-key
    secretKey: producer-secret
    topicPerms:
      - orders=PUB
  - accessKey: consumer-key
    secretKey: consumer-secret
    topicPerms:
      - orders=SUB
    groupPerms:
      - billing=SUB
  - accessKey: nobody-key
    secretKey: nobody-secret
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
"""
USERS = {"producer": ("producer-key", "producer-secret"),
         "consumer": ("consumer-key", "consumer-secret"),
         "nobody": ("nobody-key", "nobody-secret"), "admin": ("admin-key", "admin-secret")}
BILLING = d.Resource(name="billing")


def signed(user: str, secret: str | None = None, now_s: float | None = None):
    ak, sk = USERS[user]
    return sign(ak, secret or sk, "client-1", now_s=now_s)



@pytest.fixture
def acl_file(tmp_path):
    path = tmp_path / "plain_acl.yml"
    replace_file(path, ACL)
    return str(path)


def start(nodes, acl_file, name="master", **keys):
    return nodes.start(name, acl=AclConfig(enable=True, file=acl_file), **keys)


def receive(stub, md, group=BILLING, topic="orders"):
    req = s.ReceiveMessageRequest(group=group, message_queue=mq(topic, -1), batch_size=8,
                                  filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
                                  invisible_duration=duration(30),
                                  long_polling_timeout=duration(0))
    return list(stub.ReceiveMessage(req, timeout=10, metadata=md))


def test_each_method_needs_its_permission(nodes, acl_file):
    node = start(nodes, acl_file)
    stub = nodes.stub(node)
    # signatures: missing, wrong secret, unknown user -> UNAUTHORIZED
    unsigned = route(stub, "orders")
    assert unsigned.status.code == d.UNAUTHORIZED and "missing authorization" in \
        unsigned.status.message
    wrong = route(stub, "orders", metadata=signed("producer", "not-the-secret"))
    assert wrong.status.code == d.UNAUTHORIZED and "'producer-key' does not match" in \
        wrong.status.message
    stale = route(stub, "orders", metadata=signed("producer", now_s=time.time() - 3600))
    assert stale.status.code == d.UNAUTHORIZED and "behind this node's clock" in \
        stale.status.message
    # QueryRoute: PUB or SUB
    assert route(stub, "orders", metadata=signed("producer")).status.code == d.OK
    assert route(stub, "orders", metadata=signed("consumer")).status.code == d.OK
    r = route(stub, "orders", metadata=signed("nobody"))
    assert (r.status.code, r.status.message) == (
        d.FORBIDDEN, "user 'nobody-key' lacks PUB or SUB on topic 'orders'")
    # SendMessage: PUB; a refusal writes nothing
    end = node.store.max_phy_offset()
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg("orders")]), timeout=5,
                         metadata=signed("consumer"))
    assert (r.status.code, r.status.message) == (
        d.FORBIDDEN, "user 'consumer-key' lacks PUB on topic 'orders'")
    assert node.store.max_phy_offset() == end
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg("orders", keys=["k1"])]), timeout=5,
                         metadata=signed("producer"))
    assert r.status.code == d.OK, r.status
    # ReceiveMessage: SUB on the group and the topic
    [refused] = receive(stub, signed("producer"))
    assert (refused.status.code, refused.status.message) == (
        d.FORBIDDEN, "user 'producer-key' lacks SUB on group 'billing'")
    [refused] = receive(stub, signed("consumer"), group=d.Resource(name="other"))
    assert refused.status.message == "user 'consumer-key' lacks SUB on group 'other'"
    got = wait_until(lambda: [x.message for x in receive(stub, signed("consumer"))
                              if x.WhichOneof("content") == "message"], 10, "a delivery")
    handle = got[0].system_properties.receipt_handle
    # AckMessage / ChangeInvisibleDuration: SUB (group and topic / group)
    ack = s.AckMessageRequest(group=BILLING, topic=d.Resource(name="orders"), entries=[
        s.AckMessageEntry(message_id=got[0].system_properties.message_id, receipt_handle=handle)])
    assert stub.AckMessage(ack, timeout=5, metadata=signed("producer")).status.code == d.FORBIDDEN
    change = s.ChangeInvisibleDurationRequest(group=BILLING, topic=d.Resource(name="orders"),
                                              receipt_handle=handle,
                                              invisible_duration=duration(20),
                                              message_id=got[0].system_properties.message_id)
    r = stub.ChangeInvisibleDuration(change, timeout=5, metadata=signed("nobody"))
    assert r.status.message == "user 'nobody-key' lacks SUB on group 'billing'"
    assert stub.AckMessage(ack, timeout=5, metadata=signed("consumer")).status.code == d.OK
    # PullMessage, offsets, QueryAssignment: SUB
    pull = s.PullMessageRequest(group=BILLING, message_queue=mq("orders", 0), batch_size=4,
                                filter_expression=d.FilterExpression(type=d.TAG, expression="*"))
    [refused] = list(stub.PullMessage(pull, timeout=5, metadata=signed("producer")))
    assert refused.status.code == d.FORBIDDEN
    assert list(stub.PullMessage(pull, timeout=5, metadata=signed("consumer")))[0].status.code \
        == d.OK
    qo = s.QueryOffsetRequest(message_queue=mq("orders", 0), query_offset_policy=d.END)
    assert stub.QueryOffset(qo, timeout=5, metadata=signed("producer")).status.code == d.FORBIDDEN
    assert stub.QueryOffset(qo, timeout=5, metadata=signed("consumer")).status.code == d.OK
    go = s.GetOffsetRequest(group=BILLING, message_queue=mq("orders", 0))
    assert stub.GetOffset(go, timeout=5, metadata=signed("nobody")).status.code == d.FORBIDDEN
    qa = s.QueryAssignmentRequest(topic=d.Resource(name="orders"), group=BILLING)
    assert stub.QueryAssignment(qa, timeout=5, metadata=signed("producer")).status.code == \
        d.FORBIDDEN
    assert stub.QueryAssignment(qa, timeout=5, metadata=signed("consumer")).status.code == d.OK
    # Heartbeat: a known user; consumers need SUB on their group
    hb = s.HeartbeatRequest(client_type=d.PRODUCER)
    assert stub.Heartbeat(hb, timeout=5, metadata=signed("nobody")).status.code == d.OK
    assert stub.Heartbeat(hb, timeout=5).status.code == d.UNAUTHORIZED
    hb = s.HeartbeatRequest(group=BILLING, client_type=d.SIMPLE_CONSUMER)
    assert stub.Heartbeat(hb, timeout=5, metadata=signed("producer")).status.code == d.FORBIDDEN
    assert stub.Heartbeat(hb, timeout=5, metadata=signed("consumer")).status.code == d.OK
    # EndTransaction: PUB; admin: everything
    end_tx = s.EndTransactionRequest(topic=d.Resource(name="orders"), message_id="01AB",
                                     transaction_id="x", resolution=d.COMMIT)
    r = stub.EndTransaction(end_tx, timeout=5, metadata=signed("consumer"))
    assert r.status.message == "user 'consumer-key' lacks PUB on topic 'orders'"
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg("anything")]), timeout=5,
                         metadata=signed("admin"))
    assert r.status.code == d.OK


def telemetry(stub, md, settings: d.Settings):
    requests = Outbox()
    call = stub.Telemetry(iter(requests), timeout=10, metadata=md)  # Outbox: put() any time
    requests.put(s.TelemetryCommand(settings=settings))
    return requests, call


def test_telemetry_settings_are_checked(nodes, acl_file):
    node = start(nodes, acl_file)
    stub = nodes.stub(node)
    publishing = d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(
        topics=[d.Resource(name="orders")]))
    requests, call = telemetry(stub, signed("producer"), publishing)
    assert next(call).settings.publishing.topics[0].name == "orders"
    requests.close()
    list(call)
    requests, call = telemetry(stub, signed("consumer"), publishing)
    answers = list(call)  # the stream ends with the refusal
    assert answers[-1].status.code == d.FORBIDDEN
    assert answers[-1].status.message == "user 'consumer-key' lacks PUB on topic 'orders'"
    requests.close()
    _, call = telemetry(stub, [], publishing)
    assert next(call).status.code == d.UNAUTHORIZED


def test_reload_takes_effect_without_restart(nodes, acl_file, caplog):
    clock = ManualClock(time.time_ns() // 1_000_000)  # the signed dates stay in the window
    node = start(nodes, acl_file, clock=clock)
    stub = nodes.stub(node)

    def send_as(user):
        return stub.SendMessage(s.SendMessageRequest(messages=[msg("orders")]), timeout=5,
                                metadata=signed(user, now_s=clock.now_ms() / 1000)).status

    assert send_as("nobody").code == d.FORBIDDEN
    replace_file(acl_file, ACL.replace("  - accessKey: nobody-key\n    secretKey: nobody-secret\n",
                                "  - accessKey: nobody-key\n    secretKey: nobody-secret\n"
                                "    defaultTopicPerm: PUB\n"))
    clock.advance(1)
    assert send_as("nobody").code == d.OK
    replace_file(acl_file, "accounts:\n  - accessKey: nobody-key\n    defaultTopicPerm: PUB\n")
    clock.advance(1)
    assert send_as("nobody").code == d.OK  # the broken file changed nothing
    assert "secretKey is required" in node.messaging.access.problem
    assert "secretKey is required" in nodes.admin(node).status().acl_problem  # operators see it
    assert any("previous ACL stays in force" in r.message for r in caplog.records)
    replace_file(acl_file, ACL)
    clock.advance(1)
    assert send_as("nobody").code == d.FORBIDDEN and node.messaging.access.problem == ""
    assert nodes.admin(node).status().acl_problem == ""


def test_a_slave_forwards_the_callers_identity(nodes, acl_file, tmp_path):
    """The slave reads a file where consumer-key may publish, its master the real one: the
    slave admits the send and forwards it with the client's own signature, so the master
    refuses it naming consumer-key. No node accessKey/secretKey is set, so nothing but the
    client's signature can have passed the master's check."""
    lenient = tmp_path / "slave_acl.yml"
    replace_file(lenient, ACL.replace("      - orders=SUB\n", "      - orders=PUB|SUB\n"))
    master = start(nodes, acl_file, role="SYNC_MASTER")
    slave = nodes.slave(master, acl=AclConfig(enable=True, file=str(lenient)))
    stub = nodes.stub(slave)
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg("orders")]), timeout=10,
                         metadata=signed("consumer"))
    assert (r.status.code, r.status.message) == (
        d.FORBIDDEN, "user 'consumer-key' lacks PUB on topic 'orders'")
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg("orders", keys=["via-slave"])]),
                         timeout=10, metadata=signed("producer"))
    assert r.status.code == d.OK, r.status
    wait_until(lambda: master.store.query_messages("orders", "via-slave"), 10, "on the master")
    got = wait_until(lambda: [x for x in receive(stub, signed("consumer"))
                              if x.WhichOneof("content") == "message"], 10, "forwarded receive")
    assert got
    [refused] = receive(stub, signed("producer"))
    assert refused.status.code == d.FORBIDDEN


def test_admin_users_and_the_token(nodes, acl_file):
    node = start(nodes, acl_file)
    with grpc.insecure_channel(node.address) as channel:
        admin = apb_grpc.AdminStub(channel)
        status = admin.GetNodeStatus(apb.NodeStatusRequest(), timeout=5, metadata=signed("admin"))
        assert status.node_id == node.config.node_id
        with pytest.raises(grpc.RpcError) as e:
            admin.GetNodeStatus(apb.NodeStatusRequest(), timeout=5, metadata=signed("consumer"))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "'consumer-key' is not an admin" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            admin.GetNodeStatus(apb.NodeStatusRequest(), timeout=5,
                                metadata=signed("admin", "wrong-secret"))
        assert "does not match" in e.value.details()
    assert nodes.admin(node).status().node_id == node.config.node_id  # the bearer token


@pytest.mark.parametrize("node_pair", [True, False])
def test_the_telemetry_relay_signs_with_the_nodes_pair(nodes, acl_file, caplog, node_pair):
    """A slave mirrors a producer's Telemetry stream to its master on nobody's call: it signs
    with the nodes' accessKey/secretKey. Without the pair the master refuses the relay, which
    says so and backs off."""
    pair = dict(access_key="node-key-1", secret_key="node-secret-1") if node_pair else {}
    master = start(nodes, acl_file, role="SYNC_MASTER", **pair)
    slave = nodes.slave(master, acl=AclConfig(enable=True, file=acl_file), **pair)
    publishing = d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(
        topics=[d.Resource(name="orders")]))
    requests, call = telemetry(nodes.stub(slave), signed("producer"), publishing)
    assert next(call).settings.publishing.topics[0].name == "orders"
    if node_pair:
        wait_until(lambda: slave.messaging.relay.active() == 1, 10, "the relay connected")
    else:
        wait_until(lambda: any("refused by the master" in r.message for r in caplog.records),
                   10, "the relay refused")
        assert slave.messaging.relay.active() == 0
    requests.close()
    list(call)

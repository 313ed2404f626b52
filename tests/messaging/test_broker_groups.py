"""Two broker groups under one controller, in process (a ControllerProcess and real nodes on
127.0.0.1, our generated stubs): the masters register their topics, every node answers a
topic's route with the queues of every group that has it (each group's own endpoints), a group
whose master is gone is routed read-only, and the registry's calls refuse what they must."""
from __future__ import annotations

import grpc
import pytest

from cluster.assembly.controller_process import ControllerProcess
from cluster.assembly.group_topics import nodes_behind, not_routed, wait_routed
from cluster.client.controller_client import ControllerClient
from cluster.controller.controller_config import ControllerConfig, EtcdSettings
from cluster.controller.election import ElectionConfig
from cluster.security.member_gate import MemberCredentials
from cluster.security.member_proof import GET_CLUSTER_ROUTE, REGISTER_TOPICS
from proto import controller_pb2 as cpb
from proto import controller_pb2_grpc as cpb_grpc
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from tests.support.nodes import CLUSTER_SECRET
from tests.support.v2 import route
from tests.support.waiting import wait_until


def start_controller(path, etcd=None) -> ControllerProcess:
    proc = ControllerProcess(ControllerConfig(
        listen_address="127.0.0.1:0", store_path=str(path), cluster_secret=CLUSTER_SECRET,
        election=ElectionConfig(failover_timeout_ms=1500, lease_ms=1000, settle_ms=0),
        etcd=EtcdSettings(endpoints=(etcd.url,), prefix="/groups") if etcd else EtcdSettings()))
    proc.start()
    return proc


@pytest.fixture
def controller(tmp_path):
    proc = start_controller(tmp_path / "controller")
    yield proc
    proc.stop()


def controlled(nodes, controllers: str, name: str, group: str, broker_id: int = 0, **keys):
    """A node of `group` under the controllers at `controllers` (host:port;host:port)."""
    role = "ASYNC_MASTER" if broker_id == 0 else "SLAVE"
    return nodes.start(name, role=role, broker_id=broker_id, broker_name=group,
                       controller_address=controllers,
                       controller_heartbeat_interval_ms=100, **keys)


def by_group(queues) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for q in queues:
        out.setdefault(q.broker.name, []).append((q.id, q.permission))
    return out


def addresses(q: d.MessageQueue) -> list[str]:
    return [f"{a.host}:{a.port}" for a in q.broker.endpoints.addresses]


def has_topic(admin, name: str) -> bool:
    try:
        return [t.name for t in admin.list_topics(topic=name).topics] == [name]
    except grpc.RpcError as e:
        assert e.code() is grpc.StatusCode.NOT_FOUND, e
        return False


def registered(node, topic: str, group: str) -> bool:
    route = node.routes.route
    g = route.group(group) if route is not None else None
    return g is not None and topic in g.topics


def test_every_node_routes_every_groups_queues_with_that_groups_endpoints(nodes, controller):
    a = controlled(nodes, controller.address, "a0", "broker-a")
    a1 = controlled(nodes, controller.address, "a1", "broker-a", 1)
    b = controlled(nodes, controller.address, "b0", "broker-b")
    wait_until(lambda: a.role.master is not None and b.role.master is not None, 20,
               "both groups elect their master")
    wait_until(lambda: a1.role.followed_address == a.address, 20, "a1 follows a0")
    nodes.admin(a).create_topic("Both", queue_nums=2)
    nodes.admin(b).create_topic("Both", queue_nums=3)
    nodes.admin(b).create_topic("OnlyB", queue_nums=2)
    for node in (a, a1, b):
        wait_until(lambda: registered(node, "Both", "broker-b") and
                   registered(node, "Both", "broker-a") and
                   registered(node, "OnlyB", "broker-b"), 20, f"{node.config.node_id}'s route")

    for node in (a, a1, b):
        r = route(nodes.stub(node), "Both")
        assert r.status.code == d.OK, r.status
        # interleaved by turns: the official Python producer's retry lands on the other group
        assert [(q.broker.name, q.id) for q in r.message_queues] == [
            ("broker-a", 0), ("broker-b", 0), ("broker-a", 1), ("broker-b", 1), ("broker-b", 2)]
        assert all(q.permission == d.READ_WRITE and q.broker.id == 0 for q in r.message_queues)
        for q in r.message_queues:
            want = sorted([a.address, a1.address]) if q.broker.name == "broker-a" \
                else [b.address]
            assert sorted(addresses(q)) == want, (node.config.node_id, q)
        only_b = route(nodes.stub(node), "OnlyB")
        assert only_b.status.code == d.OK, only_b.status
        assert by_group(only_b.message_queues) == {"broker-b": [(0, d.READ_WRITE),
                                                                 (1, d.READ_WRITE)]}
    # known in another group: nothing is auto-created here (neither on the master nor through
    # a slave asking it)
    assert not has_topic(nodes.admin(a), "OnlyB")

    # unknown everywhere: auto-created in the group that was asked, and only there
    r = route(nodes.stub(a1), "Fresh")
    assert by_group(r.message_queues) == {"broker-a": [(i, d.READ_WRITE) for i in range(4)]}
    assert has_topic(nodes.admin(a), "Fresh")
    wait_until(lambda: registered(b, "Fresh", "broker-a"), 20, "b learns of Fresh")
    assert by_group(route(nodes.stub(b), "Fresh").message_queues).keys() == {"broker-a"}
    assert not has_topic(nodes.admin(b), "Fresh")

    # push consumers: QueryAssignment spreads the queues of both groups
    answer = nodes.stub(b).QueryAssignment(s.QueryAssignmentRequest(
        topic=d.Resource(name="Both"), group=d.Resource(name="G")), timeout=5)
    assert answer.status.code == d.OK
    assert sorted((x.message_queue.broker.name, x.message_queue.id)
                  for x in answer.assignments) == [("broker-a", 0), ("broker-a", 1),
                                                   ("broker-b", 0), ("broker-b", 1),
                                                   ("broker-b", 2)]

    token = open(controller.config.token_path).read().strip()
    with ControllerClient(controller.address, token) as client:
        view = client.groups()
    assert [g.broker_name for g in view.route.groups] == ["broker-a", "broker-b"]
    assert all(g.registered and g.master_address for g in view.route.groups)

    # broker-b's only node stops: no master can be elected, b's queues lose PERM_WRITE
    nodes.stop(b)
    wait_until(lambda: all(n.routes.route.group("broker-b").master_address == ""
                           for n in (a, a1)), 20, "the route says broker-b has no master")
    for node in (a, a1):
        r = route(nodes.stub(node), "Both")
        assert by_group(r.message_queues) == {
            "broker-a": [(0, d.READ_WRITE), (1, d.READ_WRITE)],
            "broker-b": [(0, d.READ), (1, d.READ), (2, d.READ)]}
    with ControllerClient(controller.address, token) as client:
        masterless = [g.broker_name for g in client.groups().route.groups
                      if not g.master_address]
    assert masterless == ["broker-b"]

    # a slave whose master is gone (and whose table lacks the topic) still routes the others'
    nodes.stop(a)
    r = route(nodes.stub(a1), "OnlyB")
    assert r.status.code == d.OK, r.status
    assert by_group(r.message_queues) == {"broker-b": [(0, d.READ), (1, d.READ)]}


def test_a_master_asks_the_controller_before_auto_creating_a_topic_another_group_has(
        nodes, controller):
    """A node takes a new route at its next heartbeat; a client asking it in between must not
    make its group auto-create a topic another group registered meanwhile (the official client
    would then send part of that topic's messages to a group that was never meant to hold it).
    Here broker-a's nodes never take a new route after the heartbeat that counts (`wants`
    patched): only the master's question to the controller can tell it that broker-b has the
    topic."""
    a = controlled(nodes, controller.address, "a0", "broker-a")
    a1 = controlled(nodes, controller.address, "a1", "broker-a", 1)
    b = controlled(nodes, controller.address, "b0", "broker-b")
    wait_until(lambda: a.role.master is not None and b.role.master is not None
               and a1.role.followed_address == a.address, 20, "both groups elect, a1 follows")
    wait_until(lambda: all(n.routes.route is not None and
                           n.routes.route.group("broker-b") is not None for n in (a, a1)), 20,
               "broker-a's nodes hold a route naming broker-b")
    for node in (a, a1):
        node.routes.wants = lambda version: False  # the heartbeats' route fetches stop here
    nodes.admin(b).create_topic("Late", queue_nums=2)
    wait_until(lambda: registered(b, "Late", "broker-b"), 20, "broker-b registers Late")
    assert not registered(a, "Late", "broker-b")  # a's copy is stale, as between heartbeats

    for node in (a1, a):  # through the slave (it asks its master), then on the master
        r = route(nodes.stub(node), "Late")
        assert r.status.code == d.OK, r.status
        assert by_group(r.message_queues) == {"broker-b": [(0, d.READ_WRITE),
                                                            (1, d.READ_WRITE)]}
    assert not has_topic(nodes.admin(a), "Late")
    assert registered(a, "Late", "broker-b")  # the master took the route it asked for

    # still auto-created where no group has it, after the same question
    r = route(nodes.stub(a), "Nobody")
    assert by_group(r.message_queues) == {"broker-a": [(i, d.READ_WRITE) for i in range(4)]}
    assert has_topic(nodes.admin(a), "Nobody")


def test_topic_create_waits_until_every_live_node_holds_the_route(nodes, controller):
    """`topic create --groups` returns once the controller's route has the topic in every
    group named and every live node reports holding that route (wait_routed, the CLI's wait):
    a node that does not take it is named, and the wait ends when it does."""
    a = controlled(nodes, controller.address, "a0", "broker-a")
    a1 = controlled(nodes, controller.address, "a1", "broker-a", 1)
    b = controlled(nodes, controller.address, "b0", "broker-b")
    wait_until(lambda: a.role.master is not None and b.role.master is not None
               and a1.role.followed_address == a.address, 20, "both groups elect, a1 follows")
    token = open(controller.config.token_path).read().strip()
    with ControllerClient(controller.address, token) as client:
        assert not_routed(client.groups(), "Waited", ["broker-b"]) == [
            "broker-b has not registered it yet"]
    a1.routes.wants = lambda version: False  # a1 keeps the route it holds
    nodes.admin(b).create_topic("Waited", queue_nums=2)
    missing = wait_routed(controller.address, token, "Waited", ["broker-b"], timeout_s=3)
    assert len(missing) == 1 and missing[0].startswith("broker-a:1 holds route "), missing
    assert not registered(a1, "Waited", "broker-b")
    with ControllerClient(controller.address, token) as client:
        assert nodes_behind(client.groups()) == missing  # what `cluster status` prints
    del a1.routes.wants  # takes routes again at its heartbeats
    assert wait_routed(controller.address, token, "Waited", ["broker-b"], timeout_s=20) == []
    with ControllerClient(controller.address, token) as client:
        assert nodes_behind(client.groups()) == []
    for node in (a, a1, b):
        assert registered(node, "Waited", "broker-b"), node.config.node_id
        assert by_group(route(nodes.stub(node), "Waited").message_queues).keys() == {"broker-b"}


def test_registry_calls_refuse_non_members_non_masters_and_bad_input(nodes, controller):
    a = controlled(nodes, controller.address, "a0", "broker-a")
    slave = controlled(nodes, controller.address, "a1", "broker-a", 1)
    wait_until(lambda: a.role.master is not None and slave.role.followed_address, 20,
               "broker-a runs")
    def settled() -> bool:  # registered with both endpoints: nothing moves the route now
        group = a.routes.route.group("broker-a") if a.routes.route is not None else None
        return group is not None and group.registered and \
            set(group.endpoints) == {a.address, slave.address}
    wait_until(settled, 20, "a0 registered the group with both endpoints")
    before = a.routes.route.version

    def call(method: str, request, node_id: str, purpose: str, secret: str = CLUSTER_SECRET):
        with grpc.insecure_channel(controller.address) as channel:
            metadata = MemberCredentials(secret.encode(), node_id).metadata(channel, purpose)
            return getattr(cpb_grpc.ControllerStub(channel), method)(request, timeout=5,
                                                                      metadata=metadata)

    def refused(method: str, request, node_id: str, purpose: str) -> grpc.RpcError:
        with pytest.raises(grpc.RpcError) as e:
            call(method, request, node_id, purpose)
        return e.value

    good = cpb.TopicRoute(topic_name="X", read_queue_nums=1, write_queue_nums=1, perm=6)
    reg = cpb.TopicRegistration(broker_name="broker-a", node_id="broker-a:1", version="v",
                                endpoints=[slave.address], topics=[good])
    e = refused("RegisterTopics", reg, "broker-a:1", REGISTER_TOPICS)
    assert e.code() is grpc.StatusCode.FAILED_PRECONDITION and "not the master" in e.details()
    reg.node_id = "broker-a:0"
    e = refused("RegisterTopics", reg, "broker-a:1", REGISTER_TOPICS)
    assert e.code() is grpc.StatusCode.PERMISSION_DENIED
    bad = cpb.TopicRegistration(broker_name="broker-a", node_id="broker-a:0", version="v",
                                endpoints=[a.address], topics=[cpb.TopicRoute(
                                    topic_name="X", read_queue_nums=0, write_queue_nums=1)])
    e = refused("RegisterTopics", bad, "broker-a:0", REGISTER_TOPICS)
    assert e.code() is grpc.StatusCode.INVALID_ARGUMENT and "read_queue_nums" in e.details()
    unknown = cpb.TopicRegistration(broker_name="broker-z", node_id="broker-z:0",
                                    endpoints=[a.address])
    e = refused("RegisterTopics", unknown, "broker-z:0", REGISTER_TOPICS)
    assert e.code() is grpc.StatusCode.NOT_FOUND and "broker-z" in e.details()
    with grpc.insecure_channel(controller.address) as channel:  # no membership proof
        with pytest.raises(grpc.RpcError) as e:
            cpb_grpc.ControllerStub(channel).GetClusterRoute(cpb.ClusterRouteRequest(),
                                                             timeout=5)
    assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED
    route_now = call("GetClusterRoute", cpb.ClusterRouteRequest(), "broker-a:1",
                     GET_CLUSTER_ROUTE)
    assert route_now.version == before  # nothing refused changed the route
    assert [t.topic_name for t in route_now.groups[0].topics if t.topic_name == "X"] == []


def test_a_controller_taking_over_on_etcd_gets_every_groups_topics_again(nodes, tmp_path, etcd):
    first = start_controller(tmp_path / "c1", etcd)
    second = None
    try:
        wait_until(lambda: first.leadership.is_active, 10, "the first controller leads")
        second = start_controller(tmp_path / "c2", etcd)
        both = f"{first.address};{second.address}"
        a = controlled(nodes, both, "a0", "broker-a")
        b = controlled(nodes, both, "b0", "broker-b")
        wait_until(lambda: a.role.master is not None and b.role.master is not None, 20,
                   "both groups elect their master")
        nodes.admin(a).create_topic("T", queue_nums=2)
        nodes.admin(b).create_topic("T", queue_nums=2)
        wait_until(lambda: registered(a, "T", "broker-b") and registered(b, "T", "broker-a"),
                   20, "both nodes route T in both groups")
        before = a.routes.route.version
        first.stop()  # resigns: the standby takes over with an empty registry
        wait_until(lambda: second.leadership.is_active, 20, "the second controller leads")

        def again(node) -> bool:
            route = node.routes.route
            return route.version.split("-")[0] != before.split("-")[0] and all(
                g.registered and "T" in g.topics for g in route.groups)
        wait_until(lambda: again(a) and again(b), 20, "the masters registered again")
        assert [(q.broker.name, q.id) for q in route(nodes.stub(a), "T").message_queues] == [
            ("broker-a", 0), ("broker-b", 0), ("broker-a", 1), ("broker-b", 1)]
    finally:
        first.stop()
        if second is not None:
            second.stop()

"""The route registry in memory (cluster/controller/route_registry.py), then through the
controller service with a manual clock: masters register, a group that loses its master is
routed without one, a restarted controller asks every master to register again."""
from __future__ import annotations

import pytest

from cluster.config.cluster_route import ClusterRoute, GroupRoute
from cluster.controller.controller_service import ControllerService, FileStateStore
from cluster.controller.election import ElectionConfig, NodeReport
from cluster.controller.route_registry import RegistrationRefused, RouteRegistry
from common.clock import ManualClock
from common.config_values import ConfigError
from store.broker_role import BrokerRole
from store.json_config import PERM_READ, TopicConfig

A0, A1 = "127.0.0.1:1000", "127.0.0.1:1010"
B0 = "127.0.0.1:1100"


def topic(name: str, n: int = 4, **kw) -> TopicConfig:
    return TopicConfig(topic_name=name, read_queue_nums=n, write_queue_nums=n, **kw)


def registry_with_a() -> RouteRegistry:
    r = RouteRegistry()
    r.observe("broker-a", "broker-a:0", A0, "", [A1, A0])
    return r


def test_groups_are_routed_from_the_elections_view_before_any_registration():
    r = registry_with_a()
    route = r.route()
    (a,) = route.groups
    assert (a.broker_name, a.master_id, a.master_address, a.endpoints) == \
        ("broker-a", "broker-a:0", A0, (A0, A1))
    assert not a.registered and dict(a.topics) == {}
    assert r.registered_version("broker-a") == "" and r.registered_version("nope") == ""


def test_the_master_registers_and_the_route_version_moves_only_on_a_change():
    r = registry_with_a()
    before = r.version
    after = r.register("broker-a", "broker-a:0", "v1", [A0, A1], [topic("T"), topic("U", 2)])
    assert after == r.version != before
    assert r.registered_version("broker-a") == "v1"
    a = r.route().group("broker-a")
    assert a.registered and list(a.topics) == ["T", "U"] and a.topics["U"].read_queue_nums == 2
    # the same content under a new version (a new master after a failover): no route change
    assert r.register("broker-a", "broker-a:0", "v2", [A0, A1], [topic("U", 2), topic("T")]) \
        == after
    assert r.registered_version("broker-a") == "v2"
    assert r.register("broker-a", "broker-a:0", "v3", [A0, A1], [topic("T")]) != after
    assert list(r.route().group("broker-a").topics) == ["T"]
    # the election's view: only a change of master or addresses moves the version
    v = r.version
    r.observe("broker-a", "broker-a:0", A0, "a note only", [A0, A1])
    assert r.version == v
    r.observe("broker-a", "broker-a:1", A1, "", [A0, A1])
    assert r.version != v


def test_refused_registrations_change_nothing():
    r = registry_with_a()
    r.register("broker-a", "broker-a:0", "v1", [A0], [topic("T")])
    version, route = r.version, r.route()
    with pytest.raises(RegistrationRefused, match="broker-a:1 is not the master"):
        r.register("broker-a", "broker-a:1", "v9", [A1], [topic("X")])
    with pytest.raises(KeyError):
        r.register("broker-z", "broker-z:0", "v9", [A1], [topic("X")])
    with pytest.raises(ConfigError, match="endpoint"):
        r.register("broker-a", "broker-a:0", "v9", ["not-an-address"], [topic("X")])
    with pytest.raises(ValueError, match="no endpoint"):
        r.register("broker-a", "broker-a:0", "v9", [], [topic("X")])
    with pytest.raises(ConfigError, match="listed twice"):
        r.register("broker-a", "broker-a:0", "v9", [A0], [topic("X"), topic("X", 2)])
    assert (r.version, r.route(), r.registered_version("broker-a")) == (version, route, "v1")
    # a group without a serving master takes no registration, not even from its last master
    r.observe("broker-a", "", "", "no heartbeat from master broker-a:0", [A0, A1])
    with pytest.raises(RegistrationRefused, match="none now"):
        r.register("broker-a", "broker-a:0", "v9", [A0], [topic("X")])


def test_a_masterless_group_keeps_its_topics_and_says_why():
    r = registry_with_a()
    r.observe("broker-b", "broker-b:0", B0, "", [B0])
    r.register("broker-b", "broker-b:0", "vb", [B0], [topic("T", 2)])
    r.observe("broker-b", "", "", "no heartbeat from master broker-b:0 for 3000 ms", [B0])
    route = r.route()
    assert [g.broker_name for g in route.groups] == ["broker-a", "broker-b"]
    assert route.masterless() == ["broker-b"]
    b = route.group("broker-b")
    assert not b.has_master and "no heartbeat" in b.note and list(b.topics) == ["T"]
    assert [g.broker_name for g, _ in route.holding("T")] == ["broker-b"]


def test_every_registry_starts_a_new_version_line():
    assert RouteRegistry().version != RouteRegistry().version


def test_a_node_keeps_what_it_knew_of_a_group_not_registered_yet():
    old = ClusterRoute("x-5", (GroupRoute("broker-a", master_address=A0, endpoints=(A0,),
                                          registered=True, topics=[topic("T")]),
                               GroupRoute("broker-b", master_address=B0, endpoints=(B0,),
                                          registered=True, topics=[topic("T", 2)])))
    new = ClusterRoute("y-1", (GroupRoute("broker-b", master_address=B0, endpoints=(B0,)),
                               GroupRoute("broker-a", master_address=A1, endpoints=(A1,),
                                          registered=True, topics=[topic("U")])))
    merged = new.merged(old)
    assert merged.version == "y-1"
    assert list(merged.group("broker-a").topics) == ["U"]  # registered: the new route's
    b = merged.group("broker-b")
    assert list(b.topics) == ["T"] and b.topics["T"].read_queue_nums == 2 and not b.registered
    assert new.merged(None) is new
    with pytest.raises(ConfigError, match="twice"):
        ClusterRoute("v", (GroupRoute("g"), GroupRoute("g")))


# -- through the controller service ----------------------------------------------------------
CONFIG = ElectionConfig(failover_timeout_ms=3000, lease_ms=2000, settle_ms=0)
ADDRESS = {"broker-a:0": A0, "broker-a:1": A1, "broker-b:0": B0}


class Cluster:
    """A controller service on a state file, fed heartbeats by the test at manual times."""

    def __init__(self, path: str) -> None:
        self.clock = ManualClock()
        self.path = path
        self.service = ControllerService(FileStateStore(path), CONFIG, self.clock)

    def hb(self, node: str, role: str = "TRANSITIONING", epoch: int = 0, **kw):
        group = node.rpartition(":")[0]
        return self.service.heartbeat(group, NodeReport(node_id=node, address=ADDRESS[node],
                                                        role=role, epoch=epoch, **kw))

    def advance(self, seconds: float) -> None:
        for _ in range(int(seconds * 10)):
            self.clock.advance(0.1)
            self.service.tick()

    def restart(self) -> None:
        self.service = ControllerService(FileStateStore(self.path), CONFIG, self.clock)


def test_assignments_carry_the_registry_versions_and_masters_register(tmp_path):
    c = Cluster(str(tmp_path / "state.json"))
    a = c.hb("broker-a:0", preferred_role="SYNC_MASTER")
    assert a.role is BrokerRole.SYNC_MASTER and a.registered_topics_version == ""
    c.hb("broker-a:0", role="SYNC_MASTER", epoch=1, in_sync=frozenset({"broker-a:1"}))
    c.hb("broker-a:1", preferred_role="SLAVE")
    assert c.hb("broker-b:0", preferred_role="SYNC_MASTER").role is BrokerRole.SYNC_MASTER
    c.hb("broker-b:0", role="SYNC_MASTER", epoch=1)
    with pytest.raises(RegistrationRefused):  # a slave never registers
        c.service.register_topics("broker-a", "broker-a:1", "s", [A1], [topic("T")])
    version = c.service.register_topics("broker-a", "broker-a:0", "va", [A0, A1], [topic("T")])
    c.service.register_topics("broker-b", "broker-b:0", "vb", [B0], [topic("T", 2)])
    answer = c.hb("broker-a:0", role="SYNC_MASTER", epoch=1,
                  in_sync=frozenset({"broker-a:1"}))
    assert answer.registered_topics_version == "va" and answer.route_version != version
    assert c.hb("broker-b:0", role="SYNC_MASTER", epoch=1).registered_topics_version == "vb"
    route = c.service.cluster_route()
    assert answer.route_version == route.version
    assert [(g.broker_name, g.master_address) for g, _ in route.holding("T")] == \
        [("broker-a", A0), ("broker-b", B0)]

    # broker-b's only node goes silent: nobody can be elected, the route says it has no master
    for _ in range(40):
        c.advance(0.1)
        c.hb("broker-a:0", role="SYNC_MASTER", epoch=1, in_sync=frozenset({"broker-a:1"}))
        c.hb("broker-a:1", role="SLAVE", epoch=1)
    route = c.service.cluster_route()
    assert route.masterless() == ["broker-b"]
    assert "no heartbeat from master broker-b:0" in route.group("broker-b").note
    assert list(route.group("broker-b").topics) == ["T"]
    # broker-a's master goes silent: its slave takes over and the route follows
    for _ in range(40):
        c.advance(0.1)
        c.hb("broker-a:1", role="SLAVE", epoch=1)
    assert c.service.cluster_route().group("broker-a").master_address == A1
    with pytest.raises(RegistrationRefused):  # the deposed master's late registration
        c.service.register_topics("broker-a", "broker-a:0", "late", [A0], [topic("X")])
    assert list(c.service.cluster_route().group("broker-a").topics) == ["T"]

    # a restarted controller knows no topics: every Assignment asks its master again
    c.restart()
    route = c.service.cluster_route()
    assert route.version != answer.route_version
    assert not any(g.registered for g in route.groups)
    assert c.hb("broker-b:0", role="SYNC_MASTER", epoch=1).registered_topics_version == ""
    c.service.register_topics("broker-b", "broker-b:0", "vb", [B0], [topic("T", 2)])
    assert c.service.cluster_route().group("broker-b").registered

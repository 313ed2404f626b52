"""The cluster-wide checks of an audit over several groups (cluster.audit.groups) on small
in-memory inputs: GroupTables and a ClusterRoute built by hand, no Spark."""
from __future__ import annotations

from store.json_config import PERM_READ, PERM_WRITE, TopicConfig

from cluster.audit import groups as g
from cluster.audit.model import ERROR, INFO, WARNING
from cluster.config.cluster_route import ClusterRoute, GroupRoute

RW = PERM_READ | PERM_WRITE


def topic(name: str, queues: int = 4, perm: int = RW) -> TopicConfig:
    return TopicConfig(topic_name=name, read_queue_nums=queues, write_queue_nums=queues, perm=perm)


def table(group: str, *topics: TopicConfig, version=(1000, 3), complete=True) -> g.GroupTable:
    return g.GroupTable(group, f"{group}-master", version, {t.topic_name: t for t in topics}, complete)


def route_group(name: str, *topics: TopicConfig, version=(1000, 3), registered=True) -> GroupRoute:
    ts, changes = version
    return GroupRoute(name, master_id=f"{name}:0", master_address="127.0.0.1:1", registered=registered,
                      topics=topics, topics_version=f"c{changes}-t{ts}-e0badf00d")


def saved(*groups: GroupRoute, before: str = "v1") -> g.SavedRoute:
    return g.SavedRoute(ClusterRoute("v1", groups), before, "127.0.0.1:9")


def kinds(found):
    return [(f["kind"], f["severity"], f["group"], f["topic"]) for f in found]


def test_a_registry_that_matches_every_table_finds_nothing():
    tables = {"broker-a": table("broker-a", topic("Orders"), topic("OnlyA", 1)),
              "broker-b": table("broker-b", topic("Orders"))}
    route = saved(route_group("broker-a", topic("Orders"), topic("OnlyA", 1)),
                  route_group("broker-b", topic("Orders")))
    assert g.cluster_findings(route, tables) == []


def test_registry_mismatches_are_errors_at_the_same_table_version():
    tables = {"broker-a": table("broker-a", topic("Orders"), topic("Kept")),
              "broker-b": table("broker-b", topic("Orders"))}
    route = saved(route_group("broker-a", topic("Orders", 8), topic("Ghost")),
                  route_group("broker-b", topic("Orders", perm=PERM_READ)))
    found = g.route_findings(route, tables)
    problems = {(f["group"], f["topic"]): (f["severity"], f["details"]["problem"]) for f in found}
    assert problems == {
        ("broker-a", "Ghost"): (ERROR, "not in the group's table"),
        ("broker-a", "Kept"): (ERROR, "not registered"),
        ("broker-a", "Orders"): (ERROR, "differs in readQueueNums,writeQueueNums"),
        ("broker-b", "Orders"): (ERROR, "differs in perm"),
    }
    assert all(f["kind"] == "route_topic_mismatch" for f in found)
    assert found[0]["replica"] == "broker-a-master"


def test_registry_mismatches_are_warnings_when_the_versions_differ_or_the_route_moved():
    tables = {"broker-a": table("broker-a", topic("Orders"), topic("New"), version=(2000, 4))}
    stale = g.route_findings(saved(route_group("broker-a", topic("Orders"))), tables)
    assert kinds(stale) == [("route_topic_mismatch", WARNING, "broker-a", "New")]
    assert "is not the copy's table version" in stale[0]["details"]["why_warning"]
    moving = {"broker-a": table("broker-a", topic("Orders"), topic("New"))}
    found = g.route_findings(saved(route_group("broker-a", topic("Orders")), before="v0"), moving)
    assert kinds(found) == [("route_topic_mismatch", WARNING, "broker-a", "New")]
    assert "changed while the copies were pulled" in found[0]["details"]["why_warning"]
    partial = {"broker-a": table("broker-a", topic("Orders"), topic("New"), complete=False)}
    found = g.route_findings(saved(route_group("broker-a", topic("Orders"))), partial)
    assert kinds(found) == [("route_topic_mismatch", WARNING, "broker-a", "New")]


def test_groups_missing_unregistered_or_not_audited():
    tables = {"broker-a": table("broker-a", topic("Orders")), "broker-b": table("broker-b"),
              "broker-c": table("broker-c", topic("Orders"))}
    route = saved(route_group("broker-b", registered=False), route_group("broker-c", topic("Orders")),
                  route_group("broker-d"))
    assert sorted(kinds(g.route_findings(route, tables))) == [
        ("route_group_missing", ERROR, "broker-a", None),
        ("route_group_not_audited", WARNING, "broker-d", None),
        ("route_group_unregistered", WARNING, "broker-b", None)]


def test_no_route_is_one_finding_of_the_severity_asked():
    tables = {"broker-a": table("broker-a")}
    (f,) = g.route_findings(None, tables, missing_reason="controller down")
    assert (f["kind"], f["severity"], f["details"]["reason"]) == ("route_unavailable", WARNING, "controller down")
    (f,) = g.route_findings(None, tables, INFO)
    assert f["severity"] == INFO


def test_queue_counts_that_differ_between_groups_are_warnings():
    tables = {"broker-a": table("broker-a", topic("Orders", 8), topic("Same"), topic("AutoA", 4),
                                topic("rmq_sys_X", 1)),
              "broker-b": table("broker-b", topic("Orders", 4), topic("Same"), topic("rmq_sys_X", 2)),
              "broker-c": table("broker-c", topic("Orders", 8), topic("Same"), topic("AutoC", 1)),
              "broker-d": None}
    (f,) = g.queue_count_findings(tables)
    assert (f["kind"], f["severity"], f["topic"], f["group"]) == (
        "topic_queues_differ", WARNING, "Orders", "broker-a,broker-b,broker-c")
    assert f["details"]["queues"]["broker-b"] == {"read": 4, "write": 4}


def test_route_json_round_trip_and_registered_version():
    route = saved(route_group("broker-a", topic("Orders"), version=(1700000000123, 12)), before="v0")
    back = g.route_from_json(g.route_to_json(route))
    assert back == route and not back.stable
    assert g.registered_data_version(route.route.groups[0].topics_version) == (1700000000123, 12)
    assert g.registered_data_version("") is None


def test_group_table_from_the_metadata_summary():
    meta = {"reference_table": {"replica": "b-master", "data_version": [5, 2], "complete": True,
                                "topics": {"Orders": topic("Orders").to_json()}}}
    t = g.GroupTable.from_metadata("broker-b", meta)
    assert t == table("broker-b", topic("Orders"), version=(5, 2)).__class__(
        "broker-b", "b-master", (5, 2), {"Orders": topic("Orders")})
    assert g.GroupTable.from_metadata("broker-b", {}) is None

"""Two broker groups under one controller, as an operator runs them: `python -m cluster local
--groups 2` (six node processes and the controller), topics made across both groups with `topic
create --groups`, and the official RocketMQ 5 Python client (in a subprocess) given ONE group's
endpoints only: it learns every group from the route, sends to both groups, receives and acks
from both (a SimpleConsumer; a PushConsumer too), keeps FIFO order per message group in both, gets the check-back of
a transaction whose half message is in broker-b from broker-b, and when broker-a's master is
killed its sends keep succeeding (retried on the other group's queues) while sends to broker-b
never fail. Nothing is lost."""
from __future__ import annotations

import collections
import json
import os
import signal
import threading
import time

import grpc
import pytest

from cluster.admin.admin_token import read_token_file
from cluster.client.admin_client import AdminClient
from proto.apache.rocketmq.v2.service_pb2_grpc import MessagingServiceStub
from tests.support.official_client import client_home, run_tool
from tests.support.v2 import route as v2_route
from tests.support.waiting import wait_until

from .harness import ROOT, LocalCluster, cluster_cli

TOOLS = os.path.join(ROOT, "tests", "messaging")
CONSUMER_TOOL = os.path.join(TOOLS, "official_consumer_tool.py")
TX_TOOL = os.path.join(TOOLS, "official_tx_tool.py")
GROUPS = ("broker-a", "broker-b")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    lc = LocalCluster(str(tmp_path_factory.mktemp("groups") / "cluster"), groups=2)
    try:
        lc.wait_for("Ctrl-C stops everything cleanly", 180)
        yield lc
    finally:
        lc.kill_all()


class Folder:
    """The cluster folder as the test reads it: nodes per group, the token, the CLI."""

    def __init__(self, lc: LocalCluster) -> None:
        self.lc = lc
        self.info = lc.info()
        self.token = read_token_file(self.info["token_file"])

    def addresses(self, group: str) -> list[str]:
        return [n["address"] for n in self.info["nodes"] if n["group"] == group]

    def endpoint(self, group: str) -> str:
        """What the official client is configured with: one group's addresses."""
        return ";".join(self.addresses(group))

    def cli(self, *argv: str, code: int = 0):
        r = cluster_cli(*argv, "--cluster-dir", self.lc.root)
        assert r.returncode == code, f"{argv}: rc {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def route(self, topic: str) -> dict:
        """The controller's route of `topic` (rc 1, no groups, before any group registered it)."""
        r = cluster_cli("topic", "route", topic, "--json", "--cluster-dir", self.lc.root)
        assert r.returncode in (0, 1), f"topic route {topic}: rc {r.returncode}\n{r.stderr}"
        return json.loads(r.stdout)

    def node_routes(self, topic: str) -> set[str]:
        """The groups every node's QueryRoute names for `topic` (what an official client
        asking any of them is told) when they all name the same, else none. A node that has not
        taken the controller's new route yet creates nothing: its master asks the controller
        before auto-creating (tests/messaging/test_broker_groups.py)."""
        answers = []
        for n in self.info["nodes"]:
            with grpc.insecure_channel(n["address"]) as channel:
                try:
                    answer = v2_route(MessagingServiceStub(channel), topic)
                except grpc.RpcError:
                    return set()
            answers.append({q.broker.name for q in answer.message_queues})
        return answers[0] if all(a == answers[0] for a in answers) else set()

    def master(self, group: str) -> str:
        """The address of the group's node that reports a master role now ("" none)."""
        for address in self.addresses(group):
            with AdminClient(address, self.token, timeout=5) as admin:
                try:
                    if admin.status().role.endswith("MASTER"):
                        return address
                except grpc.RpcError:
                    continue
        return ""

    def stored(self, topic: str, groups: tuple[str, ...] = GROUPS) -> dict[str, int]:
        """How many messages of `topic` each group's master holds (Admin ListTopics)."""
        out = {}
        for group in groups:
            master = self.master(group)
            assert master, f"{group} has no master"
            with AdminClient(master, self.token, timeout=10) as admin:
                [t] = admin.list_topics(topic=topic, with_offsets=True).topics
                out[group] = t.messages
        return out

    def on_every_node(self, key: str, value: str) -> None:
        for group in GROUPS:
            for address in self.addresses(group):
                with AdminClient(address, self.token, timeout=10) as admin:
                    admin.update_config(key, value)

    def create(self, topic: str, queues: int, groups: str = "all") -> None:
        out = self.cli("topic", "create", topic, "--queues", str(queues), "--groups",
                       groups).stdout
        # the CLI waits until every live node holds a route with the topic in every group (a
        # client asking a node before its next heartbeat would be told of the groups it knew:
        # the FIFO check once saw broker-a alone); what a client is told, node by node:
        assert "every live node routes it in every group" in out, out
        want = set(GROUPS) if groups == "all" else {f"broker-{g}" for g in groups.split(",")}
        assert {g["group"] for g in self.route(topic)["groups"]} == want
        assert self.node_routes(topic) == want


def official(folder: Folder, steps: list[dict], home: str) -> list[dict]:
    return run_tool(CONSUMER_TOOL, {"endpoint": folder.endpoint("broker-a"), "steps": steps},
                    home, timeout=240)["steps"]


def group_of(folder: Folder, endpoints: str) -> str:
    """The group whose nodes a received message's endpoints are."""
    found = {g for g in GROUPS if set(endpoints.split(",")) == set(folder.addresses(g))}
    assert len(found) == 1, endpoints
    return found.pop()


def test_topics_across_groups_with_one_groups_endpoints(cluster, tmp_path):
    f = Folder(cluster)
    assert f.info["groups"] == list(GROUPS)
    assert [n["name"] for n in f.info["nodes"]] == ["master", "slave1", "slave2", "b-master",
                                                    "b-slave1", "b-slave2"]
    assert [n["group"] for n in f.info["nodes"]] == ["broker-a"] * 3 + ["broker-b"] * 3
    # bad input is refused before anything is created
    assert "must be in [1, 1024]" in f.cli("topic", "create", "Bad", "--queues", "0",
                                           "--groups", "all", code=2).stderr
    assert "no broker group 'zz'" in f.cli("topic", "create", "Bad", "--groups", "a,zz",
                                           code=2).stderr
    f.create("Spread", 4)
    assert "exists in broker-a already" in f.cli("topic", "create", "Spread", "--groups", "all",
                                                 code=1).stderr
    f.cli("topic", "route", "Bad", code=1)
    route = f.route("Spread")
    assert [(g["group"], g["routed_perm"], g["write_queue_nums"]) for g in route["groups"]] == \
        [("broker-a", "RW", 4), ("broker-b", "RW", 4)]
    listed = f.cli("topic", "list").stdout
    assert "Spread  broker-a" in listed and "Spread  broker-b" in listed, listed

    # sends spread over both groups, a SimpleConsumer receives and acks from both
    bodies = [f"spread-{i}" for i in range(40)]
    with client_home(str(tmp_path / "home")) as home:
        sent, received, pushed = official(f, [
            {"op": "send", "topic": "Spread", "messages": [{"body": b} for b in bodies]},
            {"op": "receive", "group": "SpreadG", "topic": "Spread", "count": 40,
             "within_s": 60, "await_s": 1},
            # a PushConsumer: QueryAssignment hands it the queues of both groups
            {"op": "push", "group": "SpreadPush", "topic": "Spread", "count": 40,
             "within_s": 60}], home)
    assert not any("error" in s for s in sent["sent"]), sent
    per_group = collections.Counter(s["broker"] for s in sent["sent"])
    assert per_group["broker-a"] >= 10 and per_group["broker-b"] >= 10, per_group
    assert f.stored("Spread") == dict(per_group)
    assert sorted(m["body"] for m in received["received"]) == sorted(bodies)  # 0 lost
    assert received["ack_errors"] == []
    from_group = collections.Counter(group_of(f, m["endpoints"]) for m in received["received"])
    assert from_group == per_group
    assert sorted({m["body"] for m in pushed["received"]}) == sorted(bodies)
    print(f"\nSpread: sent per group {dict(per_group)}, stored {f.stored('Spread')}, "
          f"received per group {dict(from_group)}, lost 0")

    # FIFO: a FIFO consumer group on both groups; each message group keeps its order
    for group in GROUPS:
        with AdminClient(f.master(group), f.token, timeout=10) as admin:
            admin.upsert_group("FifoG", fifo=True)
    f.create("Fifo", 4)
    fifo = [{"body": f"g{g}-{i}", "message_group": f"g{g}"} for i in range(5) for g in range(8)]
    with client_home(str(tmp_path / "fifo-home")) as home:
        sent, received = official(f, [
            {"op": "send", "topic": "Fifo", "messages": fifo},
            {"op": "receive", "group": "FifoG", "topic": "Fifo", "count": len(fifo),
             "within_s": 90, "await_s": 1}], home)
    assert not any("error" in s for s in sent["sent"]), sent
    groups_used = {s["broker"] for s in sent["sent"]}
    assert groups_used == set(GROUPS), groups_used
    firsts = [m["body"] for m in received["received"] if m["delivery_attempt"] == 1]
    assert sorted(firsts) == sorted(m["body"] for m in fifo)
    for g in range(8):
        seq = [int(b.split("-")[1]) for b in firsts if b.startswith(f"g{g}-")]
        assert seq == sorted(seq), (g, seq)

    # transactions: half messages in both groups, each checked back by its own group
    f.on_every_node("transactionTimeOut", "1000")
    f.on_every_node("transactionCheckInterval", "300")
    f.create("TxSpread", 2)
    with client_home(str(tmp_path / "tx-home")) as home:
        out = run_tool(TX_TOOL, {"endpoint": f.endpoint("broker-a"), "topic": "TxSpread",
                                 "orphans": 4, "wait_check_s": 60}, home, timeout=240)
        assert all("error" not in r for r in out["sent"].values()), out["sent"]
        halves = {body: r["broker"] for body, r in out["sent"].items()}
        assert set(halves.values()) == set(GROUPS), halves
        assert {c["body"] for c in out["checked"]} == set(halves), out["checked"]
        # the commits of the checks: each message is delivered by the group that held its half
        received = official(f, [{"op": "receive", "group": "TxG", "topic": "TxSpread",
                                 "count": 4, "within_s": 60, "await_s": 1}], home)[0]
    got = {m["body"]: group_of(f, m["endpoints"]) for m in received["received"]}
    assert got == halves, (got, halves)
    assert f.stored("TxSpread") == dict(collections.Counter(halves.values()))


def test_a_groups_master_dies_and_sends_move_to_the_other_group(cluster, tmp_path):
    f = Folder(cluster)
    f.create("Failover", 4)
    f.create("OnlyB", 2, "b")
    a_master = next(n for n in f.info["nodes"] if n["address"] == f.master("broker-a"))
    results: dict[str, list[dict]] = {}

    def send_for(topic: str, prefix: str) -> None:
        with client_home(str(tmp_path / f"home-{prefix}")) as home:
            results[topic] = official(f, [{"op": "send", "topic": topic, "for_s": 20,
                                           "interval_s": 0.05, "prefix": prefix}], home)[0]["sent"]
    senders = [threading.Thread(target=send_for, args=args)
               for args in (("Failover", "f"), ("OnlyB", "b"))]
    for t in senders:
        t.start()
    # both clients are up and sending steadily before the kill: a second of sends stored
    wait_until(lambda: min(f.stored("Failover").values()) >= 10
               and f.stored("OnlyB", ("broker-b",))["broker-b"] >= 20, 60,
               what="a second of both clients' sends stored")
    killed_at = int(time.time() * 1000)
    os.kill(a_master["pid"], signal.SIGKILL)
    for t in senders:
        t.join(240)
    sent, only_b = results["Failover"], results["OnlyB"]
    nodes = {n["address"]: f"{n['group']}/{n['name']}" for n in f.info["nodes"]}
    assert not any("error" in s for s in only_b), ([s for s in only_b if "error" in s][:3],
                                                    nodes, a_master["address"])
    assert {s["broker"] for s in only_b} == {"broker-b"}
    errors = [s for s in sent if "error" in s]
    assert not errors, errors[:3]
    after = [s for s in sent if s["sent_at_ms"] > killed_at]
    after_groups = collections.Counter(s["broker"] for s in after)
    assert after_groups["broker-b"] > 0 and after_groups["broker-a"] > 0, after_groups
    times = [s["sent_at_ms"] for s in sent]
    gap = max(b - a for a, b in zip(times, times[1:]))

    # broker-a has a new master; the route is writable in both groups again
    wait_until(lambda: f.master("broker-a") not in ("", a_master["address"]), 30,
               "a new broker-a master")
    wait_until(lambda: [g["routed_perm"] for g in f.route("Failover")["groups"]] == ["RW", "RW"],
               30, "both groups routed RW")
    with client_home(str(tmp_path / "consume-home")) as home:
        received = official(f, [{"op": "receive", "group": "FailoverG", "topic": "Failover",
                                 "count": len(sent), "distinct": True, "within_s": 120,
                                 "await_s": 1}],
                            home)[0]["received"]
    bodies = {m["body"] for m in received}
    lost = {s["body"] for s in sent} - bodies
    assert not lost, sorted(lost)[:10]
    status = f.cli("status", code=1).stdout  # 1: the killed node is unreachable
    assert "route (version" in status and "broker-a:1" in status and "broker-b:2" in status
    assert "every live node holds this route" in status or "behind (a node takes" in status
    # a planned switch of broker-b by group name: its most complete in-sync slave
    assert "no broker group 'nope'" in f.cli("switch", "--group", "nope", code=2).stderr
    b_master = f.master("broker-b")
    f.cli("switch", "--group", "broker-b")
    wait_until(lambda: f.master("broker-b") not in ("", b_master), 30,
               "broker-b's planned switch")
    print(f"\nFailover: {len(sent)} sent in 20 s ({len(after)} after the kill: "
          f"{dict(after_groups)}), 0 failed, largest gap between sends {gap} ms; "
          f"OnlyB (broker-b): {len(only_b)} sent, 0 failed; received {len(bodies)} distinct "
          f"({len(received) - len(bodies)} redelivered or duplicate), lost {len(lost)}")

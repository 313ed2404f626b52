"""Access control with the official RocketMQ 5 Python client (rocketmq-python-client, in a
subprocess: tests/messaging/official_*_tool.py) against real nodes with aclEnable: a user with
PUB sends, a user with SUB receives, users without them are refused with FORBIDDEN naming the
missing permission, a wrong secret is UNAUTHORIZED, a reload of the ACL file takes effect without
a restart, and a slave forwards the caller's identity to its master.

The client signs x-mq-date-time with its LOCAL time and a "Z": the tests run it with TZ=UTC, as
the security page of the docs tells operators to."""
from __future__ import annotations

import os

import pytest

from cluster.security.access import AclConfig
from cluster.security.acl import Need, Perm
from tests.support.official_client import client_home, run_tool
from tests.support.waiting import free_port, wait_until
from tests.support.files import replace_file

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "messaging")
PRODUCER_TOOL = os.path.join(TOOLS, "official_client_tool.py")
CONSUMER_TOOL = os.path.join(TOOLS, "official_consumer_tool.py")
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
  - accessKey: late-key
    secretKey: late-secret
"""
LATE_GRANT = ACL.replace("  - accessKey: late-key\n    secretKey: late-secret\n",
                         "  - accessKey: late-key\n    secretKey: late-secret\n"
                         "    topicPerms:\n      - orders=PUB\n")



@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # the client writes local time with a "Z"
    with client_home(str(tmp_path / "client-home")) as path:
        yield path


def client_log(home: str) -> str:
    with open(os.path.join(home, "logs", "rocketmq_python", "rocketmq_client.log"),
              encoding="utf-8", errors="replace") as f:
        return f.read()


def send_runs(runs: list[dict], home: str) -> list[list[dict]]:
    out = run_tool(PRODUCER_TOOL, {"runs": runs}, home)
    return [r["receipts"] for r in out["runs"]]


def run(endpoint: str, ak: str, sk: str, body: str, topic: str = "orders") -> dict:
    return {"endpoint": endpoint, "topic": topic, "ak": ak, "sk": sk, "request_timeout": 3,
            "messages": [{"body": body, "keys": [body]}]}


def receive(endpoint: str, ak: str, sk: str, count: int, home: str, within_s: float = 15):
    steps = [{"op": "receive", "group": "billing", "topic": "orders", "count": count,
              "within_s": within_s, "await_s": 1, "errors_end_step": True}]
    out = run_tool(CONSUMER_TOOL, {"endpoint": endpoint, "ak": ak, "sk": sk,
                                   "request_timeout": 3, "steps": steps}, home, timeout=180)
    return out["steps"][0]


def test_official_client_with_acl(nodes, tmp_path, home):
    acl_file = str(tmp_path / "plain_acl.yml")
    replace_file(acl_file, ACL)
    node = nodes.start(acl=AclConfig(enable=True, file=acl_file))
    ep = node.address
    ok, forbidden, wrong_secret, unknown = send_runs([
        run(ep, "producer-key", "producer-secret", "o-1"),
        run(ep, "consumer-key", "consumer-secret", "refused-pub"),
        run(ep, "producer-key", "not-the-secret", "refused-secret"),
        run(ep, "late-key", "late-secret", "refused-late"),
    ], home)
    assert "error" not in ok[0], ok
    assert "lacks PUB on topic 'orders'" in forbidden[0]["error"], forbidden
    assert "consumer-key" in forbidden[0]["error"] and "40300" in forbidden[0]["error"]
    # a refused route fails the producer's start; the client logs the status it got
    assert "route" in wrong_secret[0]["error"] and "route" in unknown[0]["error"]
    assert "40100, signature of user 'producer-key' does not match" in client_log(home)
    assert "40300, user 'late-key' lacks PUB or SUB on topic 'orders'" in client_log(home)
    assert not node.store.query_messages("orders", "refused-pub")
    # SUB receives; a user without SUB on the group is refused naming it
    got = receive(ep, "consumer-key", "consumer-secret", 1, home)
    assert [m["body"] for m in got["received"]] == ["o-1"] and not got["ack_errors"], got
    denied = receive(ep, "producer-key", "producer-secret", 1, home, within_s=3)
    assert denied["received"] == []
    assert "user 'producer-key' lacks SUB on group 'billing'" in denied["ack_errors"][0], denied
    # the ACL file changes: late-key may publish now, without a restart
    replace_file(acl_file, LATE_GRANT)
    access = node.messaging.access
    wait_until(lambda: access.permit("late-key", [Need.topic("orders", Perm.PUB)]) is None,
               timeout=10, what="the node to read the new ACL file")
    [late] = send_runs([run(ep, "late-key", "late-secret", "late-1")], home)
    assert "error" not in late[0], late


def test_official_client_through_a_slave_keeps_its_identity(nodes, tmp_path, home):
    """The slave's own ACL file lets consumer-key publish; its master's does not. A send through
    the slave is refused by the master naming consumer-key, so the forwarded call carried the
    client's identity (no node accessKey/secretKey is configured)."""
    master_acl, slave_acl = str(tmp_path / "master.yml"), str(tmp_path / "slave.yml")
    replace_file(master_acl, ACL)
    replace_file(slave_acl, ACL.replace("      - orders=SUB\n", "      - orders=PUB|SUB\n"))
    master = nodes.start(role="SYNC_MASTER", acl=AclConfig(enable=True, file=master_acl))
    port = free_port()
    slave = nodes.slave(master, port=port, group_addresses=(f"127.0.0.1:{port}",),
                        acl=AclConfig(enable=True, file=slave_acl))
    via_slave, refused = send_runs([
        run(slave.address, "producer-key", "producer-secret", "via-slave"),
        run(slave.address, "consumer-key", "consumer-secret", "refused-by-master"),
    ], home)
    assert "error" not in via_slave[0], via_slave
    assert via_slave[0]["endpoints"] == [slave.address]
    assert "user 'consumer-key' lacks PUB on topic 'orders'" in refused[0]["error"], refused
    wait_until(lambda: master.store.query_messages("orders", "via-slave"), 10, "on the master")
    assert not master.store.query_messages("orders", "refused-by-master")


def test_broker_conf_turns_acl_on_in_a_node_process(group, tmp_path, home):
    """The keys as an operator writes them in broker.conf, on a real node process."""
    acl_file = str(tmp_path / "plain_acl.yml")
    replace_file(acl_file, ACL)
    node = group.master("ASYNC_MASTER", aclEnable="true", aclFile=acl_file,
                        aclDateTimeWindowSeconds="120")
    config = {e.key: e.value for e in node.admin().get_config(
        ["aclEnable", "aclFile", "aclDateTimeWindowSeconds"]).entries}
    assert config == {"aclEnable": "true", "aclFile": acl_file, "aclDateTimeWindowSeconds": "120"}
    sent, refused = send_runs([run(node.address, "producer-key", "producer-secret", "p-1"),
                               run(node.address, "consumer-key", "consumer-secret", "c-1")], home)
    assert "error" not in sent[0], sent
    assert "user 'consumer-key' lacks PUB on topic 'orders'" in refused[0]["error"], refused

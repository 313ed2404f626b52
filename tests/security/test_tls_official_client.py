"""The official RocketMQ 5 Python client with tls_enable=True sends and receives against a node
serving TLS (tests/messaging/official_consumer_tool.py in a subprocess). The client trusts
gRPC's default roots only, so the test CA reaches it through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH,
as a user's would; the node's certificate names 127.0.0.1 (the client connects by IP). Without
the CA the same client cannot send. Given several endpoints (and routes listing several), it
checks each certificate against the joined list, which the certificates then name."""
from __future__ import annotations

import os

from cluster.security.cert_authority import target_names
from tests.support.official_client import client_home, run_tool
from tests.support.waiting import free_port

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "messaging",
                    "official_consumer_tool.py")


def test_official_client_sends_and_receives_over_tls(nodes, tmp_path):
    node = nodes.start(tls=nodes.tls("master"))
    roots = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": node.config.tls.trust_file}
    with client_home(str(tmp_path / "home")) as home:
        out = run_tool(TOOL, {"endpoint": node.address, "tls": True, "steps": [
            {"op": "send", "topic": "Secure", "messages": [
                {"body": f"secret-{i}", "keys": [f"k{i}"]} for i in range(3)]},
            {"op": "receive", "group": "G", "topic": "Secure", "count": 3, "within_s": 20},
        ]}, home, timeout=180, env=roots)["steps"]
    assert not any("error" in s for s in out[0]["sent"]), out[0]
    assert sorted(m["body"] for m in out[1]["received"]) == [f"secret-{i}" for i in range(3)]
    assert not out[1]["ack_errors"]
    assert [m.body for m in nodes.admin(node).query("Secure", "k1").messages] == [b"secret-1"]


def test_official_client_without_the_ca_cannot_send(nodes, tmp_path):
    node = nodes.start(tls=nodes.tls("master"))
    with client_home(str(tmp_path / "home")) as home:
        out = run_tool(TOOL, {"endpoint": node.address, "tls": True, "steps": [
            {"op": "send", "topic": "Secure", "messages": [{"body": "x", "keys": ["nope"]}]},
        ]}, home, timeout=180, env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": ""})["steps"]
    assert "error" in out[0]["sent"][0], out[0]
    assert not nodes.admin(node).query("Secure", "nope").messages


def test_official_client_given_a_master_and_a_slave_over_tls(nodes, tmp_path):
    """Two endpoints, and routes listing both: the client checks each node's certificate
    against the joined address list, which the certificates name (target_names)."""
    ports = [free_port(), free_port()]
    group = [f"127.0.0.1:{p}" for p in ports]
    names = target_names(group)
    master = nodes.start(port=ports[0], tls=nodes.tls("master", dns=names),
                         group_addresses=tuple(group))
    nodes.slave(master, port=ports[1], tls=nodes.tls("slave", dns=names),
                group_addresses=tuple(group))
    roots = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": master.config.tls.trust_file}
    with client_home(str(tmp_path / "home")) as home:
        out = run_tool(TOOL, {"endpoint": ";".join(group), "tls": True, "steps": [
            {"op": "send", "topic": "Both", "messages": [{"body": f"b-{i}"} for i in range(3)]},
            {"op": "receive", "group": "G", "topic": "Both", "count": 3, "within_s": 20},
        ]}, home, timeout=180, env=roots)["steps"]
    assert not any("error" in s for s in out[0]["sent"]), out[0]
    assert sorted(m["body"] for m in out[1]["received"]) == [f"b-{i}" for i in range(3)]

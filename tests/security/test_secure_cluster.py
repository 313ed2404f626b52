"""Everything on at once, as a deployment runs it: a master and a slave serving TLS, replicating
only after the membership proof, with ACL on; the official RocketMQ 5 Python client
(tls_enable=True, trusting the test CA through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, clock in UTC)
sends as a user with PUB, receives as a user with SUB, and is refused without them."""
from __future__ import annotations

import os

import pytest

from cluster.security.access import AclConfig
from tests.support.nodes import wait_in_sync
from tests.support.official_client import client_home, run_tool

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "messaging")
CONSUMER_TOOL = os.path.join(TOOLS, "official_consumer_tool.py")
ACL = """accounts:
  - accessKey: writer-key
    secretKey: writer-secret
    topicPerms: [Secure=PUB]
  - accessKey: reader-key
    secretKey: reader-secret
    topicPerms: [Secure=SUB]
    groupPerms: [Readers=SUB]
"""


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # the client writes its local time with a "Z"
    with client_home(str(tmp_path / "client-home")) as path:
        yield path


def official(node, ak: str, sk: str, steps: list[dict], home: str) -> list[dict]:
    roots = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": node.config.tls.trust_file}
    return run_tool(CONSUMER_TOOL, {"endpoint": node.address, "tls": True, "ak": ak, "sk": sk,
                                    "request_timeout": 3, "steps": steps},
                    home, timeout=180, env=roots)["steps"]


def test_official_client_over_tls_with_acl_on_a_replicated_group(nodes, tmp_path, home):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL)
    acl = AclConfig(enable=True, file=str(acl_file))
    master = nodes.start(role="SYNC_MASTER", tls=nodes.tls("master"), acl=acl)
    slave = nodes.slave(master, tls=nodes.tls("slave"), acl=acl)
    wait_in_sync(master, slave)

    send = {"op": "send", "topic": "Secure",
            "messages": [{"body": f"s-{i}", "keys": [f"k{i}"]} for i in range(3)]}
    sent = official(master, "writer-key", "writer-secret", [send], home)[0]["sent"]
    assert not any("error" in r for r in sent), sent
    refused = official(master, "reader-key", "reader-secret", [send], home)[0]["sent"]
    assert all("error" in r for r in refused), refused  # SUB only: no PUB on Secure

    receive = {"op": "receive", "group": "Readers", "topic": "Secure", "count": 3,
               "within_s": 20, "await_s": 1, "errors_end_step": True}
    got = official(master, "reader-key", "reader-secret", [receive], home)[0]
    assert sorted(m["body"] for m in got["received"]) == ["s-0", "s-1", "s-2"], got
    denied = official(master, "writer-key", "writer-secret", [{**receive, "within_s": 3}],
                      home)[0]
    assert denied["received"] == [] and denied["ack_errors"], denied
    assert "FORBIDDEN" in str(denied["ack_errors"]) or "lacks SUB" in str(denied["ack_errors"])

    # the slave holds what the master acknowledged (SYNC_MASTER over the TLS stream), and
    # nothing the refused producer tried to write
    admin = nodes.admin(slave)
    assert slave.store.max_phy_offset() == master.store.max_phy_offset()
    assert [m.body for m in admin.query("Secure", "k1").messages] == [b"s-1"]

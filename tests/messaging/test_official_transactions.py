"""Interop: the official RocketMQ 5 Python client's transactional Producer (in a subprocess,
official_tx_tool.py; HOME is a temp dir because the client writes ~/logs) against an in-process
node: one transaction committed, one rolled back, and one left open that the server's check-back
(over the client's Telemetry stream) brings to the client's TransactionChecker, which commits
it. The results are read back with PullMessage (our generated stubs)."""
from __future__ import annotations

import os

from tests.support.official_client import client_home, run_tool
from tests.support.v2 import pull_all
from tests.support.waiting import wait_until

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "official_tx_tool.py")
TOPIC = "TxInterop"
QUEUES = 2


def test_official_transactional_producer(nodes, tmp_path):
    node = nodes.start(default_topic_queue_nums=QUEUES, transaction_timeout_ms=1000,
                       transaction_check_interval_ms=300)
    with client_home(str(tmp_path / "home")) as home:
        out = run_tool(TOOL, {"endpoint": node.address, "topic": TOPIC, "wait_check_s": 30}, home)
        sent = out["sent"]
        assert all("error" not in r for r in sent.values()), sent
        assert out["ended"] == {"tx-commit": "ok", "tx-rollback": "ok"}, out["ended"]
        # offset msg id (32 hex) "-" MAC (32 hex): opaque to the client, passed back as is
        assert all(len(r["transaction_id"]) == 65 for r in sent.values())
        # only the open one was checked, as a message of its real topic
        bodies = {c["body"] for c in out["checked"]}
        assert bodies == {"tx-orphan"}, out["checked"]
        assert all(c["topic"] == TOPIC and c["message_id"] == sent["tx-orphan"]["message_id"]
                   for c in out["checked"])
        stub = nodes.stub(node)
        wait_until(lambda: len(pull_all(stub, TOPIC, QUEUES)) >= 2, 15, "the committed messages")
        got = {m.body.decode(): m.system_properties.message_id for m in pull_all(stub, TOPIC, QUEUES)}
        assert got == {"tx-commit": sent["tx-commit"]["message_id"],
                       "tx-orphan": sent["tx-orphan"]["message_id"]}
        assert node.messaging.transactions.open_transactions() == []

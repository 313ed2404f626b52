"""`python -m cluster produce` and `receive` (the client library behind the CLI) against an
in-process node, in subprocesses like an operator runs them."""
from __future__ import annotations

import json
import os
import subprocess
import sys


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=60)


def test_produce_then_receive_with_a_group(nodes):
    node = nodes.start()
    ep = node.address
    out = cli("produce", "--address", ep, "--topic", "Cli", "--count", "40", "--batch", "16",
              "--tag", "t1", "--keys", "key-{i}")
    assert out.returncode == 0, out.stderr
    assert "sent 40 message(s) to Cli" in out.stdout
    first = cli("receive", "--address", ep, "--topic", "Cli", "--group", "Ops", "--count",
                "25", "--wait", "3", "--json")
    assert first.returncode == 0, first.stderr
    rows = [json.loads(line) for line in first.stdout.splitlines()]
    assert len(rows) == 25 and all(r["acked"] and r["tag"] == "t1" for r in rows)
    rest = cli("receive", "--address", ep, "--topic", "Cli", "--group", "Ops", "--count",
               "100", "--wait", "2", "--json")
    bodies = {json.loads(line)["body"] for line in rest.stdout.splitlines()}
    assert bodies == {f"hello {i}" for i in range(40)} - {r["body"] for r in rows}
    assert node.store.query_messages("Cli", "key-7")
    bad = cli("receive", "--address", ep, "--topic", "Cli", "--group", "bad group", "--wait", "1")
    assert bad.returncode == 1 and "ILLEGAL_CONSUMER_GROUP" in bad.stderr

"""`python -m cluster local --acl FILE` as an operator runs it: every node checks the file (an
unsigned produce is refused, a user with PUB sends, a user with SUB receives), and a broken file
is refused before anything starts, naming the line."""
from __future__ import annotations

import os

import pytest

from tests.integration.harness import LocalCluster, cluster_cli as cli

ACL = """accounts:
  - accessKey: local-writer
    secretKey: local-writer-secret
    topicPerms: [Demo=PUB]
  - accessKey: local-reader
    secretKey: local-reader-secret
    topicPerms: [Demo=SUB]
    groupPerms: [g=SUB]
"""



@pytest.fixture
def acl_file(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    return str(path)


def test_local_cluster_with_acl(tmp_path, acl_file):
    lc = LocalCluster(os.path.join(tmp_path, "cluster"), "--acl", acl_file)
    try:
        lc.wait_for("Ctrl-C stops everything cleanly", timeout=90)
        assert f"ACL:         {acl_file}" in "".join(lc.output)
        assert "aclEnable=true" in open(os.path.join(lc.root, "slave1.conf")).read()
        base = ("--cluster-dir", lc.root, "--topic", "Demo")
        unsigned = cli("produce", *base, "--count", "1")
        assert unsigned.returncode != 0 and "UNAUTHORIZED" in unsigned.stdout + unsigned.stderr
        reader = ("--access-key", "local-reader", "--secret-key", "local-reader-secret")
        refused = cli("produce", *base, "--count", "1", *reader)
        assert refused.returncode != 0
        assert "lacks PUB on topic 'Demo'" in refused.stdout + refused.stderr
        sent = cli("produce", *base, "--count", "3", "--access-key", "local-writer",
                   "--secret-key", "local-writer-secret")
        assert sent.returncode == 0 and "sent 3 message(s)" in sent.stdout, sent.stderr
        got = cli("receive", *base, "--group", "g", "--count", "3", "--wait", "10", *reader)
        assert got.returncode == 0 and got.stdout.count("hello") == 3, got.stdout + got.stderr
    finally:
        lc.kill_all()


def test_a_broken_acl_file_stops_local_before_it_starts(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("accounts:\n  - accessKey: k\n    secretKey: short-secret-ok\n")
    r = cli("local", "--dir", str(tmp_path / "c"), "--base-port", "1", "--acl", str(bad))
    assert r.returncode == 2 and "line 2 (accounts[0]): accessKey" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not os.path.exists(tmp_path / "c")

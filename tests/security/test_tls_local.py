"""`python -m cluster local --tls` as an operator runs it: the CA and a certificate per node,
the controller and the operator in <dir>/tls (keys 0600), every port TLS only (a plaintext
client is refused), roles from the controller over TLS, `status --cluster-dir` and `produce` /
`receive` working through the CA named in cluster.json, `health --tls-ca`, the
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH line printed, and a clean stop; a second start on other ports
keeps the CA and issues the nodes' certificates anew for the new addresses."""
from __future__ import annotations

import os
import signal
import stat

import grpc
import pytest

from cluster.client.admin_client import AdminClient
from cluster.assembly.local_cluster import cluster_tls
from cluster.security.cert_authority import load_cert, subject_alt_names
from tests.integration.harness import LocalCluster, cluster_cli as cli, pid_gone, wait_until



@pytest.fixture
def local_tls(tmp_path):
    cluster = LocalCluster(os.path.join(tmp_path, "cluster"), "--tls")
    try:
        yield cluster
    finally:
        cluster.kill_all()


def test_local_cluster_with_tls(local_tls):
    lc = local_tls
    lc.wait_for("Ctrl-C stops everything cleanly", timeout=90)
    output = "".join(lc.output)
    ca = os.path.join(lc.root, "tls", "ca.pem")
    assert f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={os.path.abspath(ca)}" in output, output
    info = lc.info()
    assert info["tls"]["ca_file"] == os.path.abspath(ca)
    for name in ("ca", "master", "slave1", "slave2", "controller", "operator"):
        assert stat.S_IMODE(os.stat(os.path.join(lc.root, "tls", f"{name}.key")).st_mode) == 0o600
    assert "127.0.0.1" in subject_alt_names(load_cert(os.path.join(lc.root, "tls",
                                                                   "master.pem")))[0]
    for conf in ("master.conf", "slave1.conf", "controller.conf"):
        assert "tlsEnable=true" in open(os.path.join(lc.root, conf)).read()
    token = open(info["token_file"]).read().strip()
    master = info["nodes"][0]["address"]
    with AdminClient(master, token, timeout=10, tls=cluster_tls(info)) as admin:
        wait_until(lambda: len(admin.status().in_sync_set) == 2, 30, "both slaves in sync")
    with AdminClient(master, token, timeout=3) as plain:
        with pytest.raises(grpc.RpcError) as e:
            plain.status()
        assert e.value.code() is grpc.StatusCode.UNAVAILABLE

    status = cli("status", "--cluster-dir", lc.root)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "in-sync: broker-a:1, broker-a:2" in status.stdout, status.stdout
    assert "sync state set" in status.stdout  # the controller answered over TLS too
    sent = cli("produce", "--cluster-dir", lc.root, "--topic", "TlsDemo", "--count", "3")
    assert sent.returncode == 0, sent.stdout + sent.stderr
    got = cli("receive", "--cluster-dir", lc.root, "--node", "slave1", "--topic", "TlsDemo",
              "--group", "g", "--count", "3", "--wait", "10")
    assert got.returncode == 0 and got.stdout.count("hello") == 3, got.stdout + got.stderr
    health = cli("health", "--address", master, "--tls-ca", ca)
    assert health.returncode == 0 and "SERVING" in health.stdout, health.stderr
    assert cli("health", "--address", master, "--timeout", "2").returncode == 1

    pids = lc.node_pids()
    os.kill(lc.proc.pid, signal.SIGINT)
    assert lc.proc.wait(60) == 0
    wait_until(lambda: all(pid_gone(pid) for pid in pids), 10, "processes gone")
    ca_serial = load_cert(ca).serial_number

    again = LocalCluster(lc.root, "--tls")  # the same folder, another base port
    try:
        again.wait_for("Ctrl-C stops everything cleanly", timeout=90)
        assert load_cert(ca).serial_number == ca_serial  # the CA is kept
        joined = ",".join(sorted(f"127.0.0.1:{again.base + d}" for d in (0, 10, 20)))
        assert joined in subject_alt_names(load_cert(os.path.join(lc.root, "tls",
                                                                  "master.pem")))[1]
        status = cli("status", "--cluster-dir", lc.root)
        assert status.returncode == 0, status.stdout + status.stderr
    finally:
        again.kill_all()

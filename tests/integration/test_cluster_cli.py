"""`python -m cluster local` and `python -m cluster status` as an operator runs them: three
node processes, a shared 0600 admin token, the status table, bearer-token checks, gRPC health,
and a clean stop on SIGINT; then the operator commands (topic, message, group, config, stats,
flush, cleanup) against a master and a slave, as tables and as --json."""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster.client.admin_client import AdminClient
from proto import admin_pb2 as pb
from proto import admin_pb2_grpc as pb_grpc
from store.layout import ABORT_FILE, ADMIN_TOKEN_FILE, COMMITLOG_DIR

# LocalCluster lives in the harness; tests/audit imports it from here too.
from .harness import ROOT, LocalCluster, messages, pid_gone, wait_until  # noqa: F401


@pytest.fixture
def local_cluster(tmp_path):
    cluster = LocalCluster(os.path.join(tmp_path, "cluster"))
    try:
        yield cluster
    finally:
        cluster.kill_all()


def test_local_cluster_status_auth_health_and_clean_stop(local_cluster):
    lc = local_cluster
    lc.wait_for("local cluster up")
    lc.wait_for("Ctrl-C stops everything cleanly")
    info = lc.info()
    names = [n["name"] for n in info["nodes"]]
    assert names == ["master", "slave1", "slave2"]
    token_file = os.path.join(lc.root, ADMIN_TOKEN_FILE)
    assert os.path.abspath(info["token_file"]) == os.path.abspath(token_file)
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    token = open(token_file, encoding="utf-8").read().strip()
    master_address = info["nodes"][0]["address"]
    assert master_address == f"127.0.0.1:{lc.base}"

    with AdminClient(master_address, token, timeout=10) as admin:
        wait_until(lambda: len(admin.status().in_sync_set) == 2, 30, "both slaves in sync")
        for b in range(3):
            r = admin.send(messages("CliTopic", 10, start=b * 10))
            assert r.status == "PUT_OK", (r.status, r.reason)
        top = admin.status().max_offset
    for n in info["nodes"][1:]:
        with AdminClient(n["address"], token, timeout=10) as admin:
            wait_until(lambda: admin.status().dispatched_offset == top, 20, f"{n['name']} dispatched")
            got = admin.query("CliTopic", "key-7").messages
            assert [m.keys for m in got] == ["key-7"]

    out = subprocess.run([sys.executable, "-m", "cluster", "status", "--cluster-dir", lc.root],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    table = out.stdout
    rows = {line.split()[0]: line for line in table.splitlines() if line.startswith("broker-a:")}
    assert "SYNC_MASTER" in rows["broker-a:0"], table
    for sid in ("broker-a:1", "broker-a:2"):
        assert "SLAVE" in rows[sid] and f"following {master_address}" in rows[sid], table
        assert str(top) in rows[sid], table
    assert "in-sync: broker-a:1, broker-a:2" in table, table
    repl = [line for line in table.splitlines() if line.startswith("  broker-a:")]
    assert len(repl) == 2 and all("IN-SYNC" in line for line in repl), table

    # The smoke-test commands: send to the master, read it back from a slave.
    def cli(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cluster", *argv, "--cluster-dir", lc.root],
                              capture_output=True, text=True, cwd=ROOT, timeout=60,
                              env={**os.environ, "PYTHONPATH": ROOT})
    sent = cli("send", "--topic", "SmokeTopic", "--count", "5", "--queue", "0", "--keys", "sk-{i}",
               "--body", "smoke {i}")
    assert sent.returncode == 0 and "sent 5 message(s)" in sent.stdout, sent.stdout + sent.stderr
    with AdminClient(info["nodes"][1]["address"], token, timeout=10) as admin:
        wait_until(lambda: admin.get("SmokeTopic", 0, 0, 10).max_offset == 5, 20, "slave1 has them")
    got = cli("get", "--node", "slave1", "--topic", "SmokeTopic", "--queue", "0", "--count", "10")
    assert got.returncode == 0 and "FOUND: 5 message(s)" in got.stdout, got.stdout + got.stderr
    assert "'smoke 4'" in got.stdout
    found = cli("query", "--node", "slave2", "--topic", "SmokeTopic", "--key", "sk-3")
    assert found.returncode == 0 and "'smoke 3'" in found.stdout, found.stdout + found.stderr
    refused = cli("send", "--node", "slave1", "--topic", "SmokeTopic")
    assert refused.returncode == 1 and "FAILED_PRECONDITION" in refused.stderr, refused.stderr
    with AdminClient(master_address, token, timeout=10) as admin:
        top = admin.status().max_offset

    # Bearer token: missing or wrong -> UNAUTHENTICATED; health needs none.
    with grpc.insecure_channel(master_address) as channel:
        stub = pb_grpc.AdminStub(channel)
        with pytest.raises(grpc.RpcError) as e:
            stub.GetNodeStatus(pb.NodeStatusRequest(), timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as e:
            stub.SendMessages(pb.SendMessagesRequest(messages=messages("CliTopic", 1)), timeout=10,
                              metadata=(("authorization", "Bearer wrong-token"),))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "rmqstore.admin.v1.Admin", "rmqstore.replication.v1.Replication"):
            r = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert r.status == health_pb2.HealthCheckResponse.SERVING, service
    with AdminClient(master_address, "wrong-token", timeout=10) as admin:
        with pytest.raises(grpc.RpcError) as e:
            admin.status()
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with AdminClient(master_address, token, timeout=10) as admin:
        assert admin.status().max_offset == top  # the refused send wrote nothing

    pids = lc.node_pids()
    assert len(pids) == 4  # three nodes and the controller
    os.kill(lc.proc.pid, signal.SIGINT)
    assert lc.proc.wait(60) == 0
    lc.wait_for("local cluster stopped")
    wait_until(lambda: all(pid_gone(pid) for pid in pids), 10, "node and controller processes gone")
    for name in names:
        store = os.path.join(lc.root, name)
        assert os.path.isdir(os.path.join(store, COMMITLOG_DIR))
        assert not os.path.exists(os.path.join(store, ABORT_FILE)), f"{name} left an abort file"


# ---------------------------------------------------------------------------------------------
# the operator commands (mqadmin-like): tables for people, --json for scripts
# ---------------------------------------------------------------------------------------------
def _cluster_dir(root, nodes) -> str:
    from .harness import TOKEN
    cdir = os.path.join(root, "cli-cluster")
    os.makedirs(cdir)
    token_file = os.path.join(cdir, ADMIN_TOKEN_FILE)
    with open(token_file, "w", encoding="utf-8") as f:
        f.write(TOKEN + "\n")
    os.chmod(token_file, 0o600)
    with open(os.path.join(cdir, "cluster.json"), "w", encoding="utf-8") as f:
        json.dump({"token_file": token_file,
                   "nodes": [{"name": n.name, "address": n.address} for n in nodes]}, f)
    return cdir


def test_operator_commands_tables_and_json(group, tmp_path):
    master = group.master("ASYNC_MASTER", mappedFileSizeCommitLog=str(64 * 1024))
    slave = group.slave(master, 1)
    wait_until(lambda: len(master.status().in_sync_set) == 1, 20, "slave in sync")
    cdir = _cluster_dir(tmp_path, [master, slave])

    def cli(*argv: str, code: int = 0) -> subprocess.CompletedProcess:
        r = subprocess.run([sys.executable, "-m", "cluster", *argv, "--cluster-dir", cdir],
                           capture_output=True, text=True, cwd=ROOT, timeout=60,
                           env={**os.environ, "PYTHONPATH": ROOT})
        assert r.returncode == code, f"{argv}: rc {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    out = cli("topic", "create", "CliOrders", "--queues", "2").stdout
    assert "created topic CliOrders" in out and "RW" in out
    refused = cli("topic", "create", "CliOther", "--node", "slave1", code=1).stderr
    assert "FAILED_PRECONDITION" in refused and master.address in refused
    denied = cli("topic", "delete", "SCHEDULE_TOPIC_XXXX", code=1).stderr
    assert "PERMISSION_DENIED" in denied and "reserved" in denied
    cli("send", "--topic", "CliOrders", "--count", "6", "--keys", "order-{i}", "--queue", "1")
    wait_until(lambda: slave.status().dispatched_offset == master.status().max_offset, 20,
               "slave dispatched")

    listed = json.loads(cli("topic", "list", "--offsets", "--json").stdout)
    orders = next(t for t in listed["topics"] if t["name"] == "CliOrders")
    assert (orders["read_queue_nums"], orders["perm_name"], orders["messages"]) == (2, "RW", 6)
    assert [(q["queue_id"], q["max_offset"]) for q in orders["queues"]] == [(0, 0), (1, 6)]
    table = cli("topic", "list").stdout.splitlines()
    assert table[0].split() == ["topic", "read", "write", "perm", "order", "kind", "configured"]
    assert any(line.split()[:4] == ["CliOrders", "2", "2", "RW"] for line in table)

    found = json.loads(cli("message", "query", "--node", "slave1", "--topic", "CliOrders",
                           "--key", "order-4", "--json").stdout)
    assert [m["keys"] for m in found["messages"]] == ["order-4"]
    msg_id = found["messages"][0]["msg_id"]
    by_id = cli("message", "query", "--id", msg_id).stdout
    assert msg_id in by_id and "1 message(s)" in by_id
    dump = cli("message", "dump", "--topic", "CliOrders", "--queue", "1", "--count", "2").stdout
    assert "offset 0" in dump and "offset 1" in dump and "body        5 bytes: 'hello'" in dump
    assert "2 record(s) of CliOrders" in dump

    assert "flushed: commitlog on disk up to" in cli("flush").stdout
    stats = json.loads(cli("stats", "--json").stdout)
    # the 6 messages and the topic table's record of CliOrders
    assert stats["put_messages"] == 7 and stats["writable"] is True
    assert {"topic": "CliOrders", "queues": 1, "messages": 6} in stats["topics"]
    assert "disk usage" in cli("stats").stdout

    set_out = cli("config", "set", "fileReservedTime", "48").stdout
    assert "fileReservedTime: 72 -> 48" in set_out
    got = json.loads(cli("config", "get", "fileReservedTime", "--json").stdout)
    assert got["entries"] == [{"key": "fileReservedTime", "value": "48", "runtime_updatable": True}]
    assert "immutable at runtime" in cli("config", "set", "storePathRootDir", "/x", code=1).stderr

    assert "group CliGroup" in cli("group", "create", "CliGroup", "--retry-max-times", "2").stdout
    cli("group", "reset-offset", "CliGroup", "--topic", "CliOrders", "--offset", "1")
    progress = json.loads(cli("group", "progress", "CliGroup", "--json").stdout)
    assert [(q["queue_id"], q["committed_offset"], q["lag"]) for q in progress["queues"]] == \
        [(0, 0, 0), (1, 1, 5)]
    assert "total lag 5" in cli("group", "progress", "CliGroup").stdout
    cleanup = json.loads(cli("cleanup", "--wait-ms", "15000", "--json").stdout)
    assert cleanup["round_done"] is True and cleanup["deleted_files"] == []

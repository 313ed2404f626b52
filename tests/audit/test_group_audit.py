"""The audit across broker groups end to end: `cluster local --groups 2`, a topic created in
both groups and then given other queue numbers in broker-b, a topic auto-created in broker-a
only, messages in both groups; `python -m cluster audit` pulls the six nodes and the
controller's route and audits them in one local Spark job (verdict OK, the queue-count warning,
no registry finding). Then the same copies, damaged (a flipped body byte in b-slave1's copy, a
registry entry of broker-a's with other queue numbers), audited with `python -m cluster.audit
--groups --route` on a standalone Spark cluster (master and worker started from the pip
pyspark's spark-class on 127.0.0.1, stopped by pid): each error is found and attributed to its
group. Two Spark runs in all."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration.harness import ROOT, LocalCluster
from tests.support import audit_stores
from tests.support.spark_standalone import standalone, unavailable
from tests.support.waiting import wait_until

ENV = {**os.environ, "PYTHONPATH": ROOT}
CLI = [sys.executable, "-m", "cluster"]


def cli(root: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    r = subprocess.run([*CLI, *argv, "--cluster-dir", root], capture_output=True, text=True, cwd=ROOT,
                       env=ENV, timeout=timeout)
    assert r.returncode == 0, f"{argv}: {r.stdout}{r.stderr}"
    return r


def listed(root: str) -> dict[tuple[str, str], int]:
    rows = json.loads(cli(root, "topic", "list", "--json").stdout)["topics"]
    return {(r["topic"], r["group"]): r["read_queue_nums"] for r in rows}


@pytest.mark.timeout(1200)
def test_one_audit_over_two_groups_locally_then_damaged_on_a_standalone_cluster(tmp_path):
    why = unavailable()
    if why:
        pytest.skip(why)
    lc = LocalCluster(str(tmp_path / "cluster"), groups=2)
    try:
        lc.wait_for("Ctrl-C stops everything cleanly", timeout=120)
        root = lc.root
        cli(root, "topic", "create", "Orders", "--queues", "4", "--groups", "all")
        cli(root, "topic", "update", "Orders", "--queues", "8", "--node", "@master:broker-b")
        for node in ("@master:broker-a", "@master:broker-b"):
            cli(root, "send", "--node", node, "--topic", "Orders", "--count", "300", "--keys", "k-{i}")
        cli(root, "send", "--node", "@master:broker-a", "--topic", "OnlyA", "--count", "50")
        # the masters register their tables at their next heartbeat
        wait_until(lambda: {("Orders", "broker-a"): 4, ("Orders", "broker-b"): 8,
                            ("OnlyA", "broker-a"): 4}.items() <= listed(root).items(), 30,
                   "the registry lists Orders in both groups and OnlyA in broker-a")
        out = subprocess.run([*CLI, "audit", "--cluster-dir", root], capture_output=True, text=True,
                             cwd=ROOT, env=ENV, timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Verdict: OK" in out.stdout and "== Group broker-b ==" in out.stdout, out.stdout
    finally:
        lc.kill_all()
    (run,) = [os.path.join(root, "audits", d) for d in os.listdir(os.path.join(root, "audits"))]
    report = json.load(open(os.path.join(run, "report.json"), encoding="utf-8"))
    assert report["version"] == 2 and report["exit_status"] == 0
    assert {g: sorted(r["name"] for r in rep["replicas"]) for g, rep in report["groups"].items()} == {
        "broker-a": ["master", "slave1", "slave2"], "broker-b": ["b-master", "b-slave1", "b-slave2"]}
    for rep in report["groups"].values():
        assert rep["counts"]["error"] == 0, rep["findings"]
    cluster = report["cluster"]["findings"]
    assert [(f["kind"], f["severity"], f["topic"]) for f in cluster] == [
        ("topic_queues_differ", "warning", "Orders")], cluster
    assert report["cluster"]["route"]["groups"]["broker-b"]["registered"] is True
    assert os.path.getsize(os.path.join(run, "lag-broker-b.png")) > 0

    # damage: b-slave1's copy loses a byte below its confirm offset; the saved registry gives
    # broker-a's Orders other queue numbers (the registration's version stays the table's)
    names = [n for g in ("broker-a", "broker-b") for n in
             (("master", "slave1", "slave2") if g == "broker-a" else ("b-master", "b-slave1", "b-slave2"))]
    flipped = audit_stores.flip_body_byte(os.path.join(run, "b-slave1"), "Orders", 1, 10)
    route_path = os.path.join(run, "route.json")
    route = json.load(open(route_path, encoding="utf-8"))
    [orders] = [t for g in route["groups"] if g["broker_name"] == "broker-a"
                for t in g["topics"] if t["topicName"] == "Orders"]
    orders["readQueueNums"] = orders["writeQueueNums"] = 16
    json.dump(route, open(route_path, "w", encoding="utf-8"))

    with standalone(str(tmp_path / "spark")) as url:
        bad = subprocess.run(
            [sys.executable, "-m", "cluster.audit", *[os.path.join(run, n) for n in names],
             "--names", ",".join(names), "--groups", "broker-a,broker-a,broker-a,broker-b,broker-b,broker-b",
             "--route", route_path, "--master-url", url, "--json", str(tmp_path / "bad.json"),
             "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.driver.host=127.0.0.1",
             "--conf", "spark.executor.memory=512m"],
            capture_output=True, text=True, cwd=ROOT, timeout=600,
            env={**ENV, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable})
    assert bad.returncode == 1, bad.stdout + bad.stderr[-3000:]
    assert "Verdict: FAIL (broker-b, cluster-wide)" in bad.stdout, bad.stdout
    rep = json.load(open(tmp_path / "bad.json", encoding="utf-8"))
    a, b = rep["groups"]["broker-a"], rep["groups"]["broker-b"]
    assert a["counts"]["error"] == 0, a["findings"]
    # the flipped record fails its CRC on b-slave1: the record and the consume-queue units that
    # point at it and past it are errors there, and nowhere else in the group
    assert b["counts"]["by_replica"].keys() >= {"b-slave1"}, b["counts"]
    errors = [(f["replica"], f["kind"], f["offset"]) for f in b["findings"] if f["severity"] == "error"]
    assert {r for r, _, _ in errors} == {"b-slave1"}, b["counts"]["by_kind"]
    assert any(off == flipped for _, _, off in errors), (flipped, b["counts"]["by_kind"], errors[:10])
    (f,) = [f for f in rep["cluster"]["findings"] if f["severity"] == "error"]
    assert (f["kind"], f["group"], f["topic"]) == ("route_topic_mismatch", "broker-a", "Orders")
    assert f["details"]["problem"] == "differs in readQueueNums,writeQueueNums"

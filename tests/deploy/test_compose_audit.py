"""The compose `audit` profile: `deploy/build --spark-only` makes rmqstore-spark:<codename>, the
profile's spark-master and spark-worker come up (their own project, free host ports), and
`python -m cluster.audit` on the host runs on them (`--master-url spark://127.0.0.1:PORT`) over
the stores of a real replicated run placed in RMQSTORE_AUDIT_DIR, which the worker mounts at the
same path. Skips without Docker. The containers and the project's network go with `down`."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cluster.drills.compose_cluster import compose_command
from tests.deploy.compose_support import DEPLOY, REPO
from tests.support import audit_stores
from tests.support.waiting import free_port, wait_until


def _free_subnet() -> str:
    """A /24 no Docker network uses: compose creates the file's `rmqstore` network (a fixed
    subnet) with any service, and a compose cluster running here already holds that subnet.
    The Spark services themselves use host networking."""
    ids = subprocess.run(["docker", "network", "ls", "-q"], capture_output=True, text=True).stdout.split()
    used = subprocess.run(["docker", "network", "inspect", "--format",
                           "{{range .IPAM.Config}}{{.Subnet}} {{end}}", *ids],
                          capture_output=True, text=True).stdout.split()
    return next(f"172.31.{i}.0/24" for i in range(200, 255) if f"172.31.{i}.0/24" not in used)


def _skip_reason() -> str | None:
    if compose_command() is None:
        return "needs Docker and docker compose (or docker-compose)"
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "the Docker daemon does not answer (docker info failed)"
    return None


@pytest.mark.timeout(1500)
def test_the_audit_profile_runs_the_audit_on_compose_spark(tmp_path):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    build = subprocess.run([os.path.join(DEPLOY, "build"), "--spark-only", "--python", sys.executable],
                           cwd=REPO, capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, f"deploy/build --spark-only failed:\n{build.stdout}{build.stderr}"
    audit_dir = str(tmp_path / "audit")
    (tmp_path / "run").mkdir()
    stores = audit_stores.copy_stores(audit_stores.produce(str(tmp_path / "run")), audit_dir)
    port = free_port()
    env = {**os.environ, "RMQSTORE_AUDIT_DIR": audit_dir, "RMQSTORE_SPARK_PORT": str(port),
           "RMQSTORE_SPARK_UI_PORT": str(free_port()), "RMQSTORE_SPARK_WORKER_UI_PORT": str(free_port())}
    override = tmp_path / "network.yml"
    override.write_text(f"version: \"2.4\"\nnetworks:\n  rmqstore:\n    ipam:\n      config:\n"
                        f"        - subnet: {_free_subnet()}\n")
    compose = [*compose_command(), "-p", f"rmqstoreaudit{os.getpid()}",
               "-f", os.path.join(DEPLOY, "docker-compose.yml"), "-f", str(override), "--profile", "audit"]
    try:
        up = subprocess.run([*compose, "up", "-d", "spark-master", "spark-worker"], env=env,
                            capture_output=True, text=True, timeout=180)
        assert up.returncode == 0, f"compose up failed:\n{up.stdout}{up.stderr}"

        def registered() -> bool:
            logs = subprocess.run([*compose, "logs", "spark-worker"], env=env, capture_output=True,
                                  text=True).stdout
            return "Successfully registered with master" in logs
        wait_until(registered, 180, "the worker registered with the master", interval=1)
        out = tmp_path / "report.json"
        names = list(audit_stores.NAMES)
        audit = subprocess.run(
            [sys.executable, "-m", "cluster.audit", *[stores[n] for n in names], "--names", ",".join(names),
             "--master-url", f"spark://127.0.0.1:{port}", "--json", str(out),
             "--conf", "spark.pyspark.python=/opt/spark/venv/bin/python",
             "--conf", "spark.executor.memory=1g"],
            cwd=REPO, env={**os.environ, "PYTHONPATH": REPO, "SPARK_LOCAL_IP": "127.0.0.1"},
            capture_output=True, text=True, timeout=900)
        assert audit.returncode == 0, audit.stdout + audit.stderr[-3000:]
        assert "Verdict: OK" in audit.stdout
        report = json.loads(out.read_text())
        assert sorted(r["name"] for r in report["replicas"]) == sorted(names)
        assert report["scan"]["records"] > 0
    finally:
        subprocess.run([*compose, "down", "-v", "--remove-orphans"], env=env, capture_output=True,
                       timeout=180)

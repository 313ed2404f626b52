"""The README's audit command against a running local cluster: `python -m cluster audit` pulls
every node over Admin.ExportStore and audits the copies (exit 0, report and chart written)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from store.layout import COMMITLOG_DIR
from tests.integration.harness import ROOT, LocalCluster


def test_audit_command_pulls_and_audits_a_running_cluster(tmp_path):
    lc = LocalCluster(str(tmp_path / "cluster"))
    env = {**os.environ, "PYTHONPATH": ROOT}
    try:
        lc.wait_for("Ctrl-C stops everything cleanly")
        cli = [sys.executable, "-m", "cluster"]
        sent = subprocess.run([*cli, "send", "--cluster-dir", lc.root, "--topic", "AuditTopic",
                               "--count", "500", "--keys", "k-{i}"], capture_output=True, text=True,
                              cwd=ROOT, env=env, timeout=120)
        assert sent.returncode == 0, sent.stderr
        out = subprocess.run([*cli, "audit", "--cluster-dir", lc.root], capture_output=True,
                             text=True, cwd=ROOT, env=env, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Verdict: OK" in out.stdout, out.stdout
        runs = os.listdir(os.path.join(lc.root, "audits"))
        assert len(runs) == 1
        run = os.path.join(lc.root, "audits", runs[0])
        report = json.load(open(os.path.join(run, "report.json"), encoding="utf-8"))
        assert sorted(r["name"] for r in report["replicas"]) == ["master", "slave1", "slave2"]
        assert os.path.getsize(os.path.join(run, "lag.png")) > 0
        for name in ("master", "slave1", "slave2"):
            assert os.path.isdir(os.path.join(run, name, COMMITLOG_DIR))
    finally:
        lc.kill_all()

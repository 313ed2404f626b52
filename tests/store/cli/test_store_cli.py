"""`python -m store`: the read-only commands agree on a demo store, usage errors, and one run of
the real entry point."""
from __future__ import annotations

import os
import subprocess
import sys

from store.cli.demo_cmd import DEMO_TOPICS
from store.layout import COMMITLOG_DIR
from tests.store.tool_helpers import (DEMO_MESSAGES, FILE_SIZE, REPO_ROOT, json_lines, run,
                                      run_json, tree_digest)


def test_demo_then_inspect_dump_verify_agree(demo, capsys):
    before = tree_digest(demo)
    rc, info = run_json(capsys, "inspect", demo)
    assert rc == 0
    assert info["clean_shutdown"] is True and info["abort"] is False
    cl = info["commitlog"]
    assert cl["file_size"] == FILE_SIZE
    assert len(cl["files"]) >= 3  # small files: several of them
    assert [f["from_offset"] for f in cl["files"]] == [i * FILE_SIZE for i in range(len(cl["files"]))]
    assert cl["min_offset"] == 0 and cl["max_offset"] > 0
    queues = info["consume_queues"]
    assert {(q["topic"], q["queue_id"]) for q in queues} == {
        (t, q) for t in DEMO_TOPICS for q in range(4)}
    assert sum(q["max_offset"] - q["min_offset"] for q in queues) == DEMO_MESSAGES
    assert max(q["max_phy_offset"] for q in queues) == cl["max_offset"]
    index_files = info["index"]["files"]
    assert index_files and sum(f["entries"] for f in index_files) == 2 * DEMO_MESSAGES  # key + uniq
    cp = info["checkpoint"]
    assert cp["exists"] and cp["physicMsgTimestamp"] > 0 and "confirmPhyOffset" in cp

    rc, out, _ = run(capsys, "inspect", demo)
    assert rc == 0 and "last shutdown: clean" in out and "DemoOrders" in out

    rc, out, err = run(capsys, "dump", demo, "--json")
    assert rc == 0
    records = json_lines(out)
    assert len(records) == DEMO_MESSAGES
    assert records[-1]["offset"] + records[-1]["size"] == cl["max_offset"]
    assert f"{DEMO_MESSAGES} record(s) shown" in err

    rc, report = run_json(capsys, "verify", demo)
    assert rc == 0, report["issues"]
    assert report["ok"] and report["commitlog"]["records"] == DEMO_MESSAGES
    assert report["commitlog"]["valid_end"] == cl["max_offset"]
    assert report["consume_queues"]["units"] == DEMO_MESSAGES
    assert report["consume_queues"]["units_matching_records"] == DEMO_MESSAGES
    assert report["index"]["keys_checked"] > 0 and report["index"]["keys_missing"] == 0

    rc, out, _ = run(capsys, "verify", demo, "--index-sample", "0")
    assert rc == 0
    assert out.splitlines()[-1].startswith("verify: OK")
    assert f"{2 * DEMO_MESSAGES} index keys checked" in out.splitlines()[-1]
    assert tree_digest(demo) == before  # read-only: not a byte changed, no file added


def test_usage_errors(tmp_path, demo, capsys):
    assert run(capsys)[0] == 2
    rc, _, err = run(capsys, "inspect", tmp_path / "missing")
    assert rc == 2 and "no such directory" in err
    (tmp_path / "empty").mkdir()
    rc, _, err = run(capsys, "verify", tmp_path / "empty")
    assert rc == 2 and "not a store directory" in err
    rc, _, err = run(capsys, "get", tmp_path / "empty", "--topic", "T", "--queue", "0")
    assert rc == 2 and "not a store directory" in err
    assert os.listdir(tmp_path / "empty") == []
    rc, _, err = run(capsys, "demo", demo, "--messages", "5")
    assert rc == 2 and "already holds a commitlog" in err
    rc, _, _ = run(capsys, "put", demo, "--topic", "T", "--body", "a", "--body-file", "b")
    assert rc == 2
    rc, _, _ = run(capsys, "dump", demo, "--limit", "0")
    assert rc == 2
    rc, _, err = run(capsys, "put", tmp_path / "x", "--topic", "T", "--config", tmp_path / "nope.conf")
    assert rc == 2 and "nope.conf" in err
    assert run(capsys, "verify", "--help")[0] == 0


def test_entry_point_demo_subprocess(tmp_path):
    root = tmp_path / "demo"
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    proc = subprocess.run([sys.executable, "-m", "store", "demo", str(root), "--messages", "300",
                           "--file-size", "32K", "--progress"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "wrote 300 messages" in proc.stdout
    assert "python -m store verify" in proc.stdout
    assert len(os.listdir(root / COMMITLOG_DIR)) >= 3
    proc = subprocess.run([sys.executable, "-m", "store", "verify", str(root)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("verify: OK - 300 records")

"""The Spark consistency audit on stores of a real replicated run (see conftest.py): clean
replicas agree; each injected divergence is found with the right kind and severity; Spark
equals the plain-Python reference; the CLI's exit status. The metadata checks (topic tables,
routes, committed offsets, consumer lag) have their own module, test_audit_metadata.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

from cluster.audit import package, reference, report

from tests.support.audit_stores import (DUP_KEY, NAMES, PER_TOPIC, REPO_ROOT, SPLIT, TOPICS,
                                        by_kind, layouts_of)


def errors(result, replica=None):
    return {k: n for k, n in result.counts.items() if k[2] == "error" and replica in (None, k[0])}


def summary(result, name):
    return next(s for s in result.replicas if s["name"] == name)


def test_clean_stores_agree(clean_result):
    r = clean_result
    assert r.reference == "master"
    assert not errors(r) and not [k for k in r.counts if k[2] == "warning"], r.counts
    messages = len(TOPICS) * PER_TOPIC + 2
    tables = {name: m["topic_table_records"] + m["consumer_state_records"]
              for name, m in r.metadata["replicas"].items()}
    assert len(set(tables.values())) == 1 and tables["master"] > 1000, tables  # one snapshot at least
    for name in NAMES:
        s = summary(r, name)
        total = messages + tables[name]  # the replicated tables' records are records too
        assert s["lag_bytes"] == 0 and s["records"] == total and s["corrupt_records"] == 0, s
        assert s["valid_end"] == s["max_end"] == s["confirm_offset"] and s["commitlog_files"] >= 3, s
        assert s["cq_entries"] == total and s["epochs"] == [[1, 0]], s
    assert {q["max_offset"] for q in r.queues if q["topic"] == "AuditOrders"} == {PER_TOPIC // 4}
    assert r.scan["records"] == sum(messages + n for n in tables.values()) and r.scan["resplit_files"] == 0


def test_duplicate_unique_key_is_info_only(clean, clean_result):
    dups = by_kind(clean_result, "duplicate_key")
    assert sorted(f["replica"] for f in dups) == sorted(NAMES)
    for f in dups:
        assert f["severity"] == "info" and (f["topic"], f["queue_id"]) == ("AuditLogs", 1)
        assert f["details"]["uniq_key"] == DUP_KEY and f["details"]["count"] == 2
    rep = report.build(clean_result, layouts_of(clean), {})
    assert rep["exit_status"] == 0 and rep["counts"]["info"] == 3
    assert "duplicate_key" in report.summary_text(rep)


def test_flipped_byte_below_confirm_is_record_mismatch_error(damaged_result, damaged):
    _, info = damaged
    r = damaged_result
    assert r.reference == "master"  # epoch 3 beats the slaves' epochs 1 and 2
    [f] = by_kind(r, "record_mismatch", "slave1")
    assert f["offset"] == info["flipped"] < info["end"] and f["severity"] == "error"
    assert f["details"]["record_kind"] == "corrupt" and "record_crc" in f["details"]["fields"]
    assert f["details"]["size"] == f["details"]["reference_size"]
    s1 = summary(r, "slave1")
    assert s1["valid_end"] == info["flipped"] and s1["lag_bytes"] > 0 and s1["corrupt_records"] == 1
    # The rest of that file is not trusted: reported missing, its units unverified.
    [miss] = by_kind(r, "missing_records", "slave1")
    assert miss["severity"] == "error" and miss["offset"] > info["flipped"]
    assert by_kind(r, "cq_unverified", "slave1")
    bad = {f["offset"]: f for f in by_kind(r, "cq_bad_entry", "slave1")}
    assert bad[info["flipped"]]["details"]["problem"] == "points at a corrupt record"
    assert not by_kind(r, "queue_offset_gap"), "no gap may be reported across the unread part"


def test_tail_written_after_failover_is_diverged_tail_warning(damaged_result, damaged):
    _, info = damaged
    start, end = info["slave2_tail"]
    assert start == info["end"]
    [f] = by_kind(damaged_result, "diverged_tail", "slave2")
    assert f["severity"] == "warning" and f["offset"] == start
    assert f["details"] == {"epoch": 2, "records": 30, "bytes": end - start, "end": end,
                            "consistent_point": start, "reference_epoch": 3}
    assert not errors(damaged_result, "slave2"), damaged_result.counts
    s2 = summary(damaged_result, "slave2")
    assert s2["consistent_point"] == start and s2["confirm_bound"] == info["end"]


def test_removed_consume_queue_entry_is_cq_missing_entry_error(damaged_result, damaged):
    _, info = damaged
    phys, size, _ = info["zeroed"]
    [f] = by_kind(damaged_result, "cq_missing_entry", "master")
    assert (f["offset"], f["severity"], f["topic"], f["queue_id"], f["queue_offset"]) == \
        (phys, "error", "AuditPayments", 0, 299)
    assert f["details"] == {"size": size}


def test_consumer_offset_past_the_end(damaged_result):
    [f] = by_kind(damaged_result, "consumer_offset_ahead", "master")
    assert (f["topic"], f["queue_id"], f["queue_offset"], f["severity"]) == ("AuditOrders", 0, 500, "error")
    assert f["details"]["queue_max"] == PER_TOPIC // 4 and f["details"]["group"] == "audit-group"


def test_split_boundary_bait_rescans_the_file(damaged_result, damaged):
    _, info = damaged
    assert damaged_result.scan["resplit_files"] == 1
    bad = {f["offset"]: f for f in by_kind(damaged_result, "cq_bad_entry", "slave1")}
    assert bad[info["bait"]]["details"]["problem"] == "no record at this offset"


def test_spark_equals_reference(clean, clean_result, damaged, damaged_result, meta_damaged, meta_result):
    for dirs, got, split in ((clean, clean_result, 256 << 20), (damaged[0], damaged_result, SPLIT),
                             (meta_damaged[0], meta_result, SPLIT)):
        want = reference.audit(layouts_of(dirs), split_bytes=split)
        assert want.reference == got.reference
        assert want.counts == got.counts
        assert want.examples == got.examples
        assert want.replicas == got.replicas
        assert want.queues == got.queues
        assert want.consumers == got.consumers and want.metadata == got.metadata
        assert want.scan["resplit_files"] == got.scan["resplit_files"]


def test_cli_exit_codes(cli_runs, clean, tmp_path):
    missing = subprocess.run([sys.executable, "-m", "cluster.audit", clean["master"], str(tmp_path / "nope")],
                             cwd=REPO_ROOT, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": REPO_ROOT})
    assert missing.returncode == 2 and "no such directory" in missing.stderr
    out = {}
    for name, (proc, folder) in cli_runs.items():
        stdout, stderr = proc.communicate(timeout=300)
        out[name] = (proc.returncode, stdout, stderr[-3000:], folder)
    good_rc, good_out, good_err, good_dir = out["good"]
    bad_rc, bad_out, bad_err, bad_dir = out["bad"]
    assert good_rc == 0, good_out + good_err
    assert bad_rc == 1, bad_out + bad_err
    assert "Verdict: OK" in good_out and "record_mismatch" in bad_out
    rep = json.loads((good_dir / "report.json").read_text())
    assert rep["exit_status"] == 0 and rep["reference"] == "master" and rep["counts"]["error"] == 0
    assert {q["lag"] for q in rep["queues"]} == {0}
    assert {"spark_start_s", "scan_s", "checks_s", "report_s", "total_s"} <= set(rep["timings"])
    assert rep["scan"]["records_per_s_per_core"] > 0
    assert (good_dir / "lag.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = json.loads((bad_dir / "report.json").read_text())
    assert bad["exit_status"] == 1 and bad["counts"]["error"] > 0
    kinds = set(bad["counts"]["by_kind"])
    assert {"record_mismatch", "diverged_tail", "cq_missing_entry", "consumer_offset_ahead"} <= kinds


def test_package_zip(tmp_path):
    out = tmp_path / "audit.zip"
    names = package.build(str(out))
    with zipfile.ZipFile(out) as z:
        listed = set(z.namelist())
    assert {"cluster/audit/scan.py", "store/codec/decoding.py", "ha/epoch.py", "proto/admin_pb2.py"} <= listed
    assert listed == set(names) and not any("__pycache__" in n for n in listed)

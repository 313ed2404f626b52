"""store/readonly/verify.py through `python -m store verify`: damage in the commitlog, the consume queues
and the index is found and reported (exit 1), zeros after the end are not damage."""
from __future__ import annotations

import os
import struct

from store import codec
from store.layout import CONSUME_QUEUE_DIR, INDEX_DIR
from tests.store.tool_helpers import commitlog_file, flip, json_lines, run, run_json


def test_verify_detects_flipped_body_byte(demo, capsys):
    _, out, _ = run(capsys, "dump", demo, "--json")
    recs = json_lines(out)
    victim = recs[len(recs) // 2]
    path, pos = commitlog_file(demo, victim["offset"])
    flip(path, pos + codec.header_size(victim["sys_flag"]) + 3)  # inside the body
    rc, out, _ = run(capsys, "verify", demo)
    assert rc == 1
    assert f"first bad offset {victim['offset']}" in out
    assert out.splitlines()[-1].startswith("verify: DAMAGED")
    rc, report = run_json(capsys, "verify", demo)
    assert rc == 1 and not report["ok"]
    tail = report["commitlog"]["tail"]
    assert tail["valid_end"] == victim["offset"] == tail["bad_offset"]
    files_end = report["commitlog"]["files_end"]
    damage = next(i for i in report["issues"] if i["kind"] == "commitlog.damage")
    assert damage["offset"] == victim["offset"]
    assert damage["bytes_after"] == files_end - victim["offset"]
    assert "CRC" in damage["reason"]
    # dump still shows the record, flagged
    rc, out, _ = run(capsys, "dump", demo, "--from", victim["offset"], "--limit", "1", "--json")
    assert json_lines(out)[0]["body_crc_ok"] is False


def test_verify_garbage_after_valid_end_is_damage_zeros_are_not(demo, capsys):
    _, info = run_json(capsys, "inspect", demo)
    end = info["commitlog"]["max_offset"]
    path, pos = commitlog_file(demo, end)
    with open(path, "r+b") as fh:
        fh.seek(pos + 100)
        fh.write(b"\x01\x02\x03")
    rc, report = run_json(capsys, "verify", demo)
    assert rc == 1
    tail = report["commitlog"]["tail"]
    assert tail["valid_end"] == end and tail["nonzero_bytes_after"] == 3
    assert tail["first_nonzero_after"] == end + 100
    with open(path, "r+b") as fh:
        fh.seek(pos + 100)
        fh.write(bytes(3))
    rc, _, _ = run(capsys, "verify", demo)
    assert rc == 0


def test_verify_detects_consume_queue_unit_pointing_elsewhere(demo, capsys):
    qdir = os.path.join(demo, CONSUME_QUEUE_DIR, "DemoOrders", "1")
    path = os.path.join(qdir, sorted(os.listdir(qdir))[0])
    with open(path, "r+b") as fh:
        u5 = fh.read(20 * 6)[100:120]
        phy6 = struct.unpack(">qiq", fh.read(20))[0]
        fh.seek(5 * 20)
        fh.write(struct.pack(">q", phy6) + u5[8:])  # unit 5 now points at record 6
    rc, out, _ = run(capsys, "verify", demo)
    assert rc == 1
    assert "DemoOrders-1@5" in out
    rc, report = run_json(capsys, "verify", demo)
    kinds = report["damage_counts"]
    assert kinds.get("cq.unit_mismatch") == 1 and kinds.get("cq.bad_unit") == 1
    bad = next(i for i in report["issues"] if i["kind"] == "cq.bad_unit")
    assert bad["topic"] == "DemoOrders" and bad["queue_id"] == 1 and bad["index"] == 5
    assert bad["offset"] == phy6


def test_verify_detects_missing_unit(demo, capsys):
    qdir = os.path.join(demo, CONSUME_QUEUE_DIR, "DemoAudit", "0")
    path = os.path.join(qdir, sorted(os.listdir(qdir))[0])
    with open(path, "r+b") as fh:
        fh.seek(2 * 20)
        fh.write(bytes(20))  # a hole in the queue
    rc, report = run_json(capsys, "verify", demo)
    assert rc == 1
    assert report["damage_counts"] == {"cq.missing_unit": 1, "cq.hole": 1}
    hole = next(i for i in report["issues"] if i["kind"] == "cq.hole")
    assert (hole["topic"], hole["queue_id"], hole["index"]) == ("DemoAudit", 0, 3)


def test_verify_detects_index_damage(demo, capsys):
    ix_dir = os.path.join(demo, INDEX_DIR)
    for name in os.listdir(ix_dir):
        with open(os.path.join(ix_dir, name), "r+b") as fh:
            fh.seek(40)
            fh.write(bytes(4 * 50_000))  # every hash slot emptied
    rc, report = run_json(capsys, "verify", demo, "--index-sample", "50")
    assert rc == 1 and report["index"]["keys_missing"] == report["index"]["keys_checked"] > 0

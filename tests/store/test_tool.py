"""The store tool (`python -m store`): demo, inspect, dump, verify, put and get, in-process
through main() plus one run of the real entry point."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import pytest

from store import codec
from store.codec import Message
from store.config import StoreConfig
from store.errors import StoreLocked
from store.markers import StoreLock
from store.message_store import MessageStore
from store.cli.demo import DEMO_TOPICS
from store.cli.main import main
from store.text_output import parse_size

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO_MESSAGES = 900
FILE_SIZE = 64 * 1024


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    rc, out, _ = run(capsys, *argv, "--json")
    return rc, json.loads(out)


def json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def demo_template(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo") / "store"
    rc = main(["demo", str(root), "--messages", str(DEMO_MESSAGES), "--file-size", str(FILE_SIZE)])
    assert rc == 0
    return root


@pytest.fixture
def demo(demo_template, tmp_path):
    """A private copy of the demo store (tests damage it)."""
    root = tmp_path / "store"
    shutil.copytree(demo_template, root)
    return root


def tree_digest(root) -> dict[str, str]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def flip(path, pos: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(pos)
        b = fh.read(1)
        fh.seek(pos)
        fh.write(bytes([b[0] ^ 0xFF]))


def commitlog_file(root, offset: int):
    size = FILE_SIZE
    base = offset - offset % size
    return os.path.join(root, "commitlog", f"{base:020d}"), offset - base


# ---------------------------------------------------------------------------------------------
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


def test_dump_json_lines_and_filters(demo, capsys):
    rc, out, _ = run(capsys, "dump", demo, "--topic", "DemoPayments", "--queue", "2", "--json")
    assert rc == 0
    recs = json_lines(out)
    assert recs and all(r["topic"] == "DemoPayments" and r["queue_id"] == 2 for r in recs)
    assert [r["queue_offset"] for r in recs] == list(range(len(recs)))
    _, info = run_json(capsys, "inspect", demo)
    q = next(q for q in info["consume_queues"] if (q["topic"], q["queue_id"]) == ("DemoPayments", 2))
    assert len(recs) == q["max_offset"]
    r = recs[0]
    body = base64.b64decode(r["body_base64"])
    assert len(body) == r["body_length"] and r["body_crc_ok"]
    assert json.loads(body)["topic"] == "DemoPayments"
    assert r["body_preview"].startswith('{"id"')
    assert r["tags"] in ("TagA", "TagB", "TagC")
    assert r["keys"] == [f"order-{json.loads(body)['id']}"] and len(r["uniq_key"]) == 32
    assert codec.decode_offset_msg_id(r["msg_id"])[2] == r["offset"]
    assert r["store_time"] and r["store_timestamp"] > 0

    rc, out, _ = run(capsys, "dump", demo, "--topic", "DemoAudit", "--json")
    assert {x["queue_id"] for x in json_lines(out)} == {0, 1, 2, 3}

    rc, out, _ = run(capsys, "dump", demo, "--limit", "5", "--json")
    first5 = json_lines(out)
    assert len(first5) == 5
    rc, out, _ = run(capsys, "dump", demo, "--from", first5[3]["offset"], "--limit", "2", "--json")
    assert [x["offset"] for x in json_lines(out)] == [first5[3]["offset"], first5[4]["offset"]]
    # --from inside a record starts at the next record
    rc, out, _ = run(capsys, "dump", demo, "--from", first5[3]["offset"] + 1, "--limit", "1", "--json")
    assert json_lines(out)[0]["offset"] == first5[4]["offset"]

    rc, out, _ = run(capsys, "dump", demo, "--limit", "3", "--body")
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["OFFSET", "SIZE", "TOPIC"]
    assert sum(1 for ln in lines if ln.startswith("    | ")) == 3
    assert first5[0]["msg_id"] in out


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
    qdir = os.path.join(demo, "consumequeue", "DemoOrders", "1")
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
    qdir = os.path.join(demo, "consumequeue", "DemoAudit", "0")
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
    ix_dir = os.path.join(demo, "index")
    for name in os.listdir(ix_dir):
        with open(os.path.join(ix_dir, name), "r+b") as fh:
            fh.seek(40)
            fh.write(bytes(4 * 50_000))  # every hash slot emptied
    rc, report = run_json(capsys, "verify", demo, "--index-sample", "50")
    assert rc == 1 and report["index"]["keys_missing"] == report["index"]["keys_checked"] > 0


def test_put_then_get_round_trip(tmp_path, capsys):
    root = tmp_path / "s"
    rc, out, err = run(capsys, "put", root, "--topic", "Orders", "--queue", "1", "--tag", "TagX",
                       "--keys", "k1 k2", "--body", "héllo wörld", "--count", "3",
                       "--file-size", "64K", "--json")
    assert rc == 0, err
    puts = json_lines(out)
    assert [p["queue_offset"] for p in puts] == [0, 1, 2]
    assert all(p["status"] == "PUT_OK" for p in puts)
    assert not os.path.exists(root / "abort")  # clean shutdown
    body_file = tmp_path / "body.bin"
    body_file.write_bytes(bytes(range(256)))
    rc, out, _ = run(capsys, "put", root, "--topic", "Orders", "--queue", "1", "--tag", "TagY",
                     "--body-file", body_file)
    assert rc == 0 and "PUT_OK" in out and "queueOffset=3" in out

    rc, out, err = run(capsys, "get", root, "--topic", "Orders", "--queue", "1", "--json")
    assert rc == 0, err
    got = json_lines(out)
    assert [g["queue_offset"] for g in got] == [0, 1, 2, 3]
    assert base64.b64decode(got[0]["body_base64"]).decode() == "héllo wörld"
    assert got[0]["keys"] == ["k1", "k2"] and got[0]["tags"] == "TagX"
    assert [g["msg_id"] for g in got[:3]] == [p["msg_id"] for p in puts]
    assert base64.b64decode(got[3]["body_base64"]) == bytes(range(256))

    rc, out, _ = run(capsys, "get", root, "--topic", "Orders", "--queue", "1", "--tag-filter",
                     "TagY||TagZ", "--json")
    assert [g["queue_offset"] for g in json_lines(out)] == [3]
    rc, out, _ = run(capsys, "get", root, "--topic", "Orders", "--queue", "1", "--offset", "1",
                     "--count", "2")
    assert rc == 0 and "héllo wörld" in out and len(out.splitlines()) == 3  # header + 2
    rc, _, err = run(capsys, "get", root, "--topic", "Orders", "--queue", "1", "--tag-filter", "||")
    assert rc == 2 and "tag expression" in err
    rc, report = run_json(capsys, "verify", root)
    assert rc == 0 and report["commitlog"]["records"] == 4


def test_put_into_demo_store_keeps_its_geometry(demo, capsys, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("flushDiskType=SYNC_FLUSH\nnoSuchKey=1\nmappedFileSizeCommitLog=8192\n")
    rc, out, err = run(capsys, "put", demo, "--topic", "DemoOrders", "--queue", "0",
                       "--config", conf, "--keys", "extra")
    assert rc == 0, err
    assert "noSuchKey" in err and "mappedFileSizeCommitLog" in err
    assert "queueOffset=" in out
    rc, _, _ = run(capsys, "verify", demo)
    assert rc == 0


def test_inspect_and_verify_on_a_running_store(tmp_path, capsys):
    root = tmp_path / "live"
    config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=16 * 1024,
                         mapped_file_size_consume_queue=20 * 50, max_hash_slot_num=64,
                         max_index_num=1000)  # not RocketMQ's 1:4 ratio: inferred from headers
    store = MessageStore(config)
    store.start()
    try:
        for i in range(200):
            r = store.put_message(Message("Live", b"x" * (i % 200), i % 2,
                                          {"TAGS": "t", "KEYS": f"k{i}"}))
            assert r.ok
        deadline = time.monotonic() + 10
        while store.reput.behind() and time.monotonic() < deadline:
            store.reput.wakeup()
            time.sleep(0.01)
        names_before = sorted(os.listdir(root))
        rc, info = run_json(capsys, "inspect", root)
        assert rc == 0
        assert info["abort"] is True and info["clean_shutdown"] is False
        assert info["commitlog"]["max_offset"] == store.max_phy_offset()
        assert {(q["topic"], q["queue_id"]): q["max_offset"] for q in info["consume_queues"]} == {
            ("Live", 0): 100, ("Live", 1): 100}
        assert info["index"]["files"][0]["hash_slots"] == 64
        rc, out, _ = run(capsys, "inspect", root)
        assert rc == 0 and "NOT clean" in out
        rc, report = run_json(capsys, "verify", root)
        assert rc == 0, report["issues"]
        assert report["commitlog"]["records"] == 200 and report["index"]["keys_missing"] == 0
        assert sorted(os.listdir(root)) == names_before
        with pytest.raises(StoreLocked):  # the store still holds its lock
            StoreLock(str(root)).acquire()
        assert store.put_message(Message("Live", b"after", 0)).ok  # and still works
    finally:
        store.shutdown()


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


def test_parse_size():
    assert parse_size("4194304") == 4 * 1024 * 1024
    assert parse_size("4M") == parse_size("4MiB") == parse_size("4mb") == 4 * 1024 * 1024
    assert parse_size("64k") == 65536
    with pytest.raises(Exception):
        parse_size("lots")


def test_entry_point_demo_subprocess(tmp_path):
    root = tmp_path / "demo"
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    proc = subprocess.run([sys.executable, "-m", "store", "demo", str(root), "--messages", "300",
                           "--file-size", "32K", "--progress"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "wrote 300 messages" in proc.stdout
    assert "python -m store verify" in proc.stdout
    assert len(os.listdir(root / "commitlog")) >= 3
    proc = subprocess.run([sys.executable, "-m", "store", "verify", str(root)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("verify: OK - 300 records")

"""`python -m store put` and `get`: open the store, write, read back, keep a store's geometry."""
from __future__ import annotations

import base64
import os

from store.layout import ABORT_FILE
from tests.store.tool_helpers import json_lines, run, run_json


def test_put_then_get_round_trip(tmp_path, capsys):
    root = tmp_path / "s"
    rc, out, err = run(capsys, "put", root, "--topic", "Orders", "--queue", "1", "--tag", "TagX",
                       "--keys", "k1 k2", "--body", "héllo wörld", "--count", "3",
                       "--file-size", "64K", "--json")
    assert rc == 0, err
    puts = json_lines(out)
    assert [p["queue_offset"] for p in puts] == [0, 1, 2]
    assert all(p["status"] == "PUT_OK" for p in puts)
    assert not os.path.exists(root / ABORT_FILE)  # clean shutdown
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

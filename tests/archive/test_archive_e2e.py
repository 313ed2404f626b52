"""The archive end to end, with real processes: a master and a slave whose retention deletes
each commitlog file as soon as it is sealed, the slave shipping to a first archive that keeps
nothing itself and forwards everything to a second one (mixed mode: a chain). Messages the
cluster deleted are then found through the CLI by key, id and time, and re-sent to the cluster,
where the official RocketMQ 5 client consumes them with their original body, keys, tag and
properties plus ARCHIVE_ORIGIN."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from proto import admin_pb2 as admin_pb

from cluster.assembly.local_archive import EVERY_HOUR
from tests.integration.harness import ROOT, ArchiveServerProcess, wait_until
from tests.support.official_client import client_home, run_tool

TOOL = os.path.join(ROOT, "tests", "messaging", "official_consumer_tool.py")
SHORT_RETENTION = {"fileReservedTime": "0", "deleteWhen": EVERY_HOUR,
                   "cleanResourceInterval": "300"}


def cli(*args: str) -> dict | list:
    proc = subprocess.run([sys.executable, "-m", "cluster", *args, "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture
def home(tmp_path):
    with client_home(str(tmp_path / "client-home")) as path:
        yield path


def test_deleted_messages_are_found_in_the_chained_archive_and_consumed_again(
        group, tmp_path, home):
    registry = str(tmp_path / "archives.json")
    last = group.add(ArchiveServerProcess(str(tmp_path), "archive2", {"registryFile": registry}))
    last.start()
    first = group.add(ArchiveServerProcess(str(tmp_path), "archive1", {
        "registryFile": registry, "forwardAddress": last.address, "forwardAheadHours": "0",
        **SHORT_RETENTION}))
    first.start()
    master = group.master("ASYNC_MASTER", **SHORT_RETENTION)
    slave = group.slave(master, 1, archiveAddress=first.address,
                        archiveShipIntervalMillis="200", **SHORT_RETENTION)

    ids, n = [], 1200
    for start in range(0, n, 100):
        batch = [admin_pb.Message(topic="Orders", queue_id=i % 2, keys=f"order-key-{i}",
                                  tags="paid" if i % 2 else "new", unique_key=f"U-{i}",
                                  properties={"region": f"r{i % 3}"},
                                  body=f"order-{i}-".encode() + b"x" * 2000)
                 for i in range(start, start + 100)]
        r = master.admin().send(batch)
        assert r.status == "PUT_OK"
        ids += [x.msg_id for x in r.results]

    # the cluster deletes the first files (both nodes), the chain ends up holding them
    wait_until(lambda: master.status().min_offset > 0 and slave.status().min_offset > 0,
               timeout=60)
    gone = [i for i in range(n) if not master.admin().query("Orders", f"order-key-{i}").messages]
    assert len(gone) > 300, gone
    wait_until(lambda: not _files(first, indexed_only=False) and len(_files(last)) >= 2,
               timeout=60)

    i = gone[len(gone) // 2]
    by_key = cli("history", "query", "--registry", registry, "--topic", "Orders", "--key",
                 f"order-key-{i}")
    assert [m["body_size"] for m in by_key] == [len(f"order-{i}-") + 2000]
    by_id = cli("history", "query", "--registry", registry, "--id", ids[i])
    assert [m["unique_key"] for m in by_id] == [f"U-{i}"]
    by_uniq = cli("history", "query", "--registry", registry, "--id", f"U-{i}")
    assert [m["msg_id"] for m in by_uniq] == [ids[i]]
    by_time = cli("history", "query", "--registry", registry, "--topic", "Orders", "--begin",
                  "1", "--max", "1024")
    assert {m["unique_key"] for m in by_time} >= {f"U-{g}" for g in gone}

    chosen = gone[:5]
    sent = cli("history", "reconsume", "--registry", registry, "--to", master.address,
               "--topic", "Replay", *[a for g in chosen for a in ("--id", ids[g])])
    assert len(sent["results"]) == 5 and sent["not_found"] == []
    steps = run_tool(TOOL, {"endpoint": master.address, "steps": [
        {"op": "receive", "group": "Replayer", "topic": "Replay", "count": 5}]}, home,
        timeout=180)["steps"]
    got = sorted(steps[0]["received"], key=lambda m: m["body"])
    want = sorted(chosen, key=lambda g: f"order-{g}-")
    assert [m["body"] for m in got] == [f"order-{g}-" + "x" * 2000 for g in want]
    assert [m["keys"] for m in got] == [[f"order-key-{g}"] for g in want]
    assert [m["tag"] for m in got] == ["paid" if g % 2 else "new" for g in want]
    for m, g in zip(got, want):
        assert m["properties"]["region"] == f"r{g % 3}"
        assert m["properties"]["ARCHIVE_ORIGIN"] == f"broker-a:{ids[g]}:U-{g}"


def _files(archive: ArchiveServerProcess, indexed_only: bool = True) -> list:
    h = cli("history", "holdings", "--archive", archive.address, "--token-file",
            os.path.join(archive.store_dir, "admin.token"))
    files = h[0]["groups"][0].get("files", []) if h[0].get("groups") else []
    return [f for f in files if f["indexed"] or not indexed_only]

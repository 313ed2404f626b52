"""The search over every archived file: Spark (local[2]) and the local scan find exactly the
messages the filters describe, skip gaps and partial uploads, agree with the archive's own
index, and write JSON and Parquet; bad input exits 2 with a message."""
from __future__ import annotations

import argparse
import json
import os
import zlib

import pytest

from common.crc import crc32c
from proto import admin_pb2 as admin_pb
from common.clock import ManualClock
from store.codec import Message
from store.put_result import PutStatus

from cluster.archive.archive import Archive
from cluster.archive.search_filter import SearchFilter
from cluster.archive.spark_search import search_local, search_spark
from cluster.archive.upload import UploadHeader
from cluster.audit.job import make_spark
from cluster.cli import history_search_cmd
from tests.store.retention_env import FILE, Env


@pytest.fixture(scope="module")
def spark():
    session = make_spark("local[2]", app_name="archive-search-tests",
                         conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    """An archive root holding files 0, 1, 3 and 4 of a store (file 2 is a gap) and a stray
    partial upload; the messages expected in it."""
    tmp = tmp_path_factory.mktemp("search")
    env = Env(tmp / "node")
    sent = []
    i = 0
    while len(env.store.commitlog.queue) < 6:
        topic = "Orders" if i % 3 else "Audit"
        props = {"TAGS": "paid" if i % 2 else "new", "KEYS": f"order-{i} batch-{i // 10}",
                 "region": f"r{i % 4}"}
        body = (f"order {i} " + ("needle " if i % 17 == 0 else "") + "x" * 300).encode()
        r = env.store.put_message(Message(topic=topic, body=body, queue_id=i % 2,
                                          properties=props))
        assert r.status is PutStatus.PUT_OK
        env.clock.advance(0.01)
        sent.append((i, topic, props, body, r.appends[0].wrote_offset,
                     r.appends[0].store_timestamp))
        i += 1
    archive = Archive(str(tmp / "archive"), ManualClock())
    files = env.store.commitlog.queue.snapshot()[:5]
    for f in files:
        if f.file_from_offset == 2 * FILE:
            continue  # a gap
        data = bytes(f.view[:FILE])
        archive.receive(UploadHeader("broker-a", f.file_from_offset, FILE, 0, crc32c(data),
                                     "zlib"), iter([(zlib.compress(data), FILE, crc32c(data))]))
    archive.index_all()
    part = os.path.join(archive.root, "broker-a", "commitlog", f"{5 * FILE:020d}.part")
    with open(part, "wb") as fh:
        fh.write(bytes(f.view[:4096]))
    env.store.shutdown()
    held = [s for s in sent if s[4] < 5 * FILE and not 2 * FILE <= s[4] < 3 * FILE]
    yield archive, held
    archive.close()


def offsets(rows) -> list[int]:
    return [r["commit_log_offset"] for r in rows]


FILTERS = {
    "key": (SearchFilter(key="order-7"), lambda s: s[0] == 7),
    "second key": (SearchFilter(topic="Orders", key="batch-3"),
                   lambda s: s[0] // 10 == 3 and s[1] == "Orders"),
    "tag": (SearchFilter(topic="Audit", tag="paid"),
            lambda s: s[1] == "Audit" and s[2]["TAGS"] == "paid"),
    "property": (SearchFilter(properties=(("region", "r2"),)), lambda s: s[2]["region"] == "r2"),
    "body": (SearchFilter(body_contains=b"needle"), lambda s: b"needle" in s[3]),
    "combined": (SearchFilter(topic="Orders", properties=(("region", "r1"),),
                              body_contains=b"order 1"),
                 lambda s: s[1] == "Orders" and s[2]["region"] == "r1" and b"order 1" in s[3]),
}


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_spark_and_local_find_what_the_filter_describes(spark, archived, name):
    archive, held = archived
    flt, want = FILTERS[name]
    expected = [s[4] for s in held if want(s)]
    assert expected  # each filter has something to find
    assert offsets(search_local(archive.root, flt)) == expected
    assert offsets(r.asDict() for r in search_spark(spark, archive.root, flt).collect()) == \
        expected


def test_a_time_range_and_the_archives_index_agree(spark, archived):
    archive, held = archived
    begin, end = held[10][5], held[40][5]
    flt = SearchFilter(topic="Orders", begin_ms=begin, end_ms=end)
    found = [r.asDict() for r in search_spark(spark, archive.root, flt).collect()]
    assert offsets(found) == [s[4] for s in held if s[1] == "Orders" and begin <= s[5] <= end]
    by_index = archive.query("", admin_pb.QueryMessagesRequest(
        topic="Orders", begin_timestamp_ms=begin, end_timestamp_ms=end, max_count=1024))
    assert [m.commit_log_offset for m in by_index.messages] == offsets(found)
    for r in found[:5]:  # and by key, the index's other half
        hit = archive.query("", admin_pb.QueryMessagesRequest(topic="Orders",
                                                              key=r["keys"].split()[0]))
        assert [m.msg_id for m in hit.messages] == [r["msg_id"]]


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    history_search_cmd.add_parser(parser.add_subparsers())
    return history_search_cmd.run(parser.parse_args(["search", *argv]))


def test_json_and_parquet_outputs_and_bad_input(spark, archived, tmp_path, capsys):
    archive, held = archived
    out = tmp_path / "found.json"
    assert run_cli(["--archive-dir", archive.root, "--property", "region=r3", "--local",
                    "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert offsets(rows) == [s[4] for s in held if s[2]["region"] == "r3"]
    assert json.loads(rows[0]["properties"])["region"] == "r3"
    parquet = tmp_path / "found.parquet"
    flt = SearchFilter(properties=(("region", "r3"),))
    search_spark(spark, archive.root, flt).write.parquet(str(parquet))
    assert sorted(offsets(r.asDict() for r in spark.read.parquet(str(parquet)).collect())) == \
        offsets(rows)
    assert run_cli(["--archive-dir", archive.root, "--property", "novalue", "--local"]) == 2
    assert run_cli(["--archive-dir", archive.root, "--begin", "5", "--end", "4", "--local"]) == 2
    assert run_cli(["--archive-dir", str(tmp_path / "nothing"), "--local"]) == 2
    err = capsys.readouterr().err
    assert "NAME=VALUE" in err and "after end" in err and "not a directory" in err

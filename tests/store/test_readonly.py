"""store/readonly: the read-only view of a store directory (commitlog walk, queues, index), also
on a running store, which it never touches."""
from __future__ import annotations

import os
import time

import pytest

from store.codec import Message, MessageRecord, RecordKind, header_size
from store.config import StoreConfig
from store.errors import StoreLocked
from store.markers import StoreLock
from store.layout import COMMITLOG_DIR
from store.message_store import MessageStore
from store.readonly import NotAStoreDirectory, ScanResult, StoreReader
from tests.store.tool_helpers import DEMO_MESSAGES, FILE_SIZE, commitlog_file, run, run_json


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


def test_not_a_store_directory(tmp_path):
    with pytest.raises(NotAStoreDirectory, match="no such directory"):
        StoreReader(str(tmp_path / "missing"))
    with pytest.raises(NotAStoreDirectory, match="not a store directory"):
        StoreReader(str(tmp_path))


def test_scan_reports_where_and_why_it_stopped(demo):
    with StoreReader(str(demo)) as reader:
        res = ScanResult()
        offsets = [o for o, _, _, _ in reader.scan(check_crc=True, result=res)]
        assert len(offsets) == DEMO_MESSAGES == res.records
        assert res.valid_end == reader.valid_end() and res.stop_kind is RecordKind.EMPTY
        assert res.stop_reason == "end of data (zero header)" and res.gap is None
        assert not res.blank_mismatches and res.offset_mismatch_count == 0
        inside = offsets[100] + 1  # a start inside a record: its file from the beginning
        again = ScanResult()
        assert next(iter(reader.scan(inside, result=again)))[0] == offsets[101]
        assert again.start == reader.file_for(inside).base
        record = reader.record_at(offsets[7])
        assert isinstance(record, MessageRecord) and record.physical_offset == offsets[7]
    victim = offsets[500]
    path, pos = commitlog_file(demo, victim)
    with open(path, "r+b") as fh:  # zeros inside the body: the body CRC fails
        fh.seek(pos + header_size(0) + 3)
        fh.write(bytes(8))
    with StoreReader(str(demo)) as reader:
        res = ScanResult()
        assert len(list(reader.scan(result=res))) == 500
        assert res.valid_end == victim and res.stop_kind is RecordKind.CORRUPT
        assert "CRC" in res.stop_reason


def test_scan_stops_at_a_missing_file(demo):
    names = sorted(os.listdir(os.path.join(demo, COMMITLOG_DIR)))
    os.unlink(os.path.join(demo, COMMITLOG_DIR, names[1]))
    with StoreReader(str(demo)) as reader:
        res = ScanResult()
        list(reader.scan(result=res))
        assert res.gap == (FILE_SIZE, 2 * FILE_SIZE) and res.valid_end == FILE_SIZE
        assert res.stop_kind is RecordKind.CORRUPT and names[2] in res.stop_reason


def test_queue_files_and_index_reader(demo):
    with StoreReader(str(demo)) as reader:
        queues = reader.queues()
        assert len(queues) == 12 and reader.queue("Nope", 0) is None
        q = reader.queue("DemoOrders", 1)
        assert q.max_offset() == sum(1 for _ in q.iter_units(q.files[0])) > 0
        index, unit = q.last_real()
        assert index == q.max_offset() - 1 and q.unit(index) == unit
        record = reader.record_at(unit[0])
        assert (record.topic, record.queue_id, record.queue_offset) == ("DemoOrders", 1, index)
        (ix,) = reader.index_files()
        assert (ix.slots, ix.max_entries) == (50_000, 200_000)  # the tool's geometry, inferred
        assert ix.entries == 2 * DEMO_MESSAGES
        assert record.physical_offset in set(ix.lookup(f"DemoOrders#{record.keys[0]}"))

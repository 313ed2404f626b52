"""Admin Flush, TriggerCleanup and GetStoreStats on real in-process nodes: a flush puts the
commitlog on disk now and a failing msync answers INTERNAL with the disk error; cleanup deletes
what retention may delete (nothing young, everything old once fileReservedTime allows) and says
so; statistics match the store."""
from __future__ import annotations

import os

import grpc
import pytest

from store.layout import COMMITLOG_DIR
from tests.faults import EIO, FaultyFileIO
from tests.support.admin import messages
from tests.support.nodes import settle


# 64 KiB commitlog files; timed flushing far apart: only Flush puts the commitlog on disk
# during a test.
STORE = dict(mapped_file_size_commit_log=64 * 1024, flush_interval_commit_log=600_000,
             flush_commit_log_thorough_interval=600_000, flush_commit_log_least_pages=1000)


def test_flush_stats_and_cleanup(nodes):
    node = nodes.start(store=STORE)
    c = nodes.admin(node)
    for start in range(0, 300, 50):  # ~330 KB: six 64 KiB commitlog files
        assert c.send(messages("StatsTopic", 50, start=start, size=1000)).status == "PUT_OK"
    settle(node)
    store = node.store
    assert store.flushed_offset < store.max_phy_offset()
    f = c.flush()
    assert f.flushed_offset == f.max_offset == store.max_phy_offset() == store.flushed_offset
    assert f.dispatched_offset == f.max_offset

    s = c.store_stats()
    assert (s.node_id, s.role, s.writable) == ("broker-a:0", "ASYNC_MASTER", True)
    assert (s.put_messages, s.put_failures) == (301, 0)  # and the topic table's record of StatsTopic
    assert s.put_bytes == s.max_offset == store.max_phy_offset()
    assert s.commitlog_files == len(os.listdir(store.config.commit_log_dir)) >= 5
    assert s.commitlog_file_size == 64 * 1024 and s.dispatch_behind_bytes == 0
    assert 0 <= s.disk_usage_ratio <= 1 and s.disk_usage_path
    assert [(t.topic, t.queues, t.messages) for t in s.topics] == [("StatsTopic", 4, 300),
                                                                    ("rmq_sys_TOPIC_TABLE", 1, 1)]
    assert s.store_path == store.config.store_path_root_dir

    # young files are kept, whatever the trigger says
    young = c.trigger_cleanup(wait_ms=15_000)
    assert young.round_done and list(young.deleted_files) == []
    assert "fileReservedTime=72" in young.note and young.manual_rounds_left >= 0
    assert store.min_phy_offset() == 0

    c.update_config("fileReservedTime", "0")
    files = sorted(os.listdir(store.config.commit_log_dir))
    old = c.trigger_cleanup(wait_ms=15_000)
    assert old.round_done and old.min_offset_before == 0
    deleted = sorted(os.path.basename(p) for p in old.deleted_files)
    assert deleted and deleted == files[:len(deleted)] and files[-1] not in deleted
    assert old.min_offset_after == store.min_phy_offset() > 0
    assert sorted(os.listdir(store.config.commit_log_dir)) == files[len(deleted):]
    assert c.store_stats().retention_files_deleted >= len(deleted)
    assert c.get("StatsTopic", 0, 0, 1).status in ("OFFSET_TOO_SMALL", "FOUND",
                                                   "MESSAGE_WAS_REMOVING")
    with pytest.raises(grpc.RpcError) as e:
        c.trigger_cleanup(wait_ms=70_000)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_failed_flush_answers_internal_with_the_disk_error(nodes):
    io = FaultyFileIO()
    node = nodes.start(io=io, store=STORE)
    c = nodes.admin(node)
    try:
        assert c.send(messages("FlushFails", 10)).status == "PUT_OK"
        io.fail("msync", EIO, path_contains=COMMITLOG_DIR)
        with pytest.raises(grpc.RpcError) as e:
            c.flush()
        assert e.value.code() == grpc.StatusCode.INTERNAL
        assert "msync" in e.value.details() and "Input/output error" in e.value.details()
        assert not node.store.writable
        s = c.store_stats()
        assert not s.writable and "DISK_ERROR" in s.not_writable
        with pytest.raises(grpc.RpcError) as again:  # sticky: a later flush says so too
            c.flush()
        assert again.value.code() == grpc.StatusCode.INTERNAL
        assert "until a restart" in again.value.details()
    finally:
        io.heal()  # before the fixture stops the node

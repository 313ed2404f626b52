"""Killed transfers resume: a real node process ships to a real archive process; the archive is
SIGKILLed in the middle of one file and the node in the middle of another. After the restarts
every file is on the archive exactly once, byte for byte, and each resumed upload sent only
what the archive lacked."""
from __future__ import annotations

import os
import random
import time

import grpc
import pytest

from proto import admin_pb2 as admin_pb
from proto import archive_pb2 as pb
from proto import archive_pb2_grpc as pb_grpc
from store.layout import offset_file_name

from cluster.archive.upload import file_crc32c
from tests.integration.harness import ArchiveServerProcess, NodeProcess, wait_until

FILE = 16 << 20
GROUP = "broker-a"


@pytest.fixture
def procs(tmp_path):
    started: list[NodeProcess] = []
    yield started
    for p in started:
        p.kill()


def part_path(archive: ArchiveServerProcess, offset: int) -> str:
    return os.path.join(archive.store_dir, GROUP, "commitlog", offset_file_name(offset) + ".part")


def wait_partial(archive: ArchiveServerProcess, offset: int, at_least: int = 1 << 20) -> None:
    path = part_path(archive, offset)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if os.path.getsize(path) >= at_least:
                return
        except FileNotFoundError:
            pass
        time.sleep(0.002)
    raise AssertionError(f"no partial upload of {offset} appeared")


def holdings(archive: ArchiveServerProcess) -> list[pb.ArchivedFile]:
    with grpc.insecure_channel(archive.address) as channel:
        h = pb_grpc.ArchiveStub(channel).ListHoldings(
            pb.HoldingsRequest(broker_group=GROUP),
            metadata=[("authorization", f"Bearer {archive.token}")], timeout=10)
    return list(h.groups[0].files) if h.groups else []


def test_killed_transfers_resume_without_loss_or_duplicates(tmp_path, procs):
    archive = ArchiveServerProcess(str(tmp_path), "archive", {})
    procs.append(archive)
    node = NodeProcess(str(tmp_path), "node", {
        "brokerRole": "ASYNC_MASTER", "mappedFileSizeCommitLog": str(FILE),
        "archiveAddress": archive.address, "archiveShipFrom": "ANY", "archiveShipAll": "true",
        "archiveShipIntervalMillis": "100", "archiveBlockBytes": "65536"})
    procs.append(node)
    node.start()
    rng = random.Random(7)
    sent = 0
    while sent * 3000 < 3.2 * FILE:  # three sealed files, the fourth begun
        batch = [admin_pb.Message(topic="T", queue_id=0, keys=f"key-{sent + i}",
                                  body=rng.randbytes(3000)) for i in range(64)]
        assert node.admin().send(batch).status == "PUT_OK"
        sent += len(batch)
    node.stop()  # the archive is not up yet: nothing shipped so far

    archive.start()
    node.start()
    wait_partial(archive, 0)  # the archive dies in the middle of file 0
    archive.kill()
    archive.start()
    wait_until(lambda: [f.file_offset for f in holdings(archive)][:1] == [0], timeout=60)
    wait_partial(archive, FILE)  # the node dies in the middle of file 1
    node.kill()
    node.start()
    wait_until(lambda: [f.indexed for f in holdings(archive)] == [True] * 3, timeout=60)

    files = holdings(archive)
    assert [f.file_offset for f in files] == [0, FILE, 2 * FILE]  # each once, in order
    for f in files:
        local = os.path.join(node.store_dir, "commitlog", offset_file_name(f.file_offset))
        stored = os.path.join(archive.store_dir, GROUP, "commitlog",
                              offset_file_name(f.file_offset))
        assert f.file_crc32c == file_crc32c(local) == file_crc32c(stored)
        assert not os.path.exists(stored + ".part")
    log = node.log_text()
    assert log.count("resumed at") >= 2, log[-3000:]  # after either kill, only the rest went
    # messages of each file are found once by their key (file 2 begins past 2 * FILE bytes)
    with grpc.insecure_channel(archive.address) as channel:
        stub = pb_grpc.ArchiveStub(channel)
        meta = [("authorization", f"Bearer {archive.token}")]
        for i in (0, FILE // 3100, 2 * FILE // 3100 + 100):
            r = stub.QueryMessages(pb.ArchiveQueryRequest(query=admin_pb.QueryMessagesRequest(
                topic="T", key=f"key-{i}")), metadata=meta, timeout=10)
            assert len(r.messages) == 1
        r = stub.QueryMessages(pb.ArchiveQueryRequest(query=admin_pb.QueryMessagesRequest(
            topic="T", begin_timestamp_ms=1, max_count=1024, omit_body=True)),
            metadata=meta, timeout=10)
        assert r.truncated and [m.queue_offset for m in r.messages] == list(range(1024))

"""Issue 17: a real node on a small tmpfs volume (mounted here, unmounted in cleanup), filled by a
producer while its consumer group lags.

- protect-unconsumed: no acknowledged message the group has not consumed is deleted; sends are
  refused with DISK_FULL naming the group; once the group catches up, writes resume.
- delete-oldest: RocketMQ's rule; the forced deletions are counted in the node's log.
- the startup check: a node on a 256 MB volume refuses the defaults (1 GiB commitlog files) and
  names mappedFileSizeCommitLog; with that lowered it starts and stores messages.

Needs root (mount); skipped with the reason when mounting is not permitted. Figures are
printed (pytest -s) for the issue's report.
"""
from __future__ import annotations

import os
import re
import time



from cluster.client import ClientError, Message, Producer, SimpleConsumer
from cluster.client.connection import Connection
from cluster.client.producer import NO_RETRY
from tests.integration.harness import NodeProcess
from tests.support.waiting import wait_until

BODY = b"x" * 8192
BATCH = 16


def small_node(tmp_path, vol: str, policy: str) -> NodeProcess:
    return NodeProcess(str(tmp_path), f"node-{policy}", {
        "storePathRootDir": os.path.join(vol, "store"),
        "mappedFileSizeCommitLog": str(2 * 1024 * 1024),
        "mappedFileSizeConsumeQueue": str(6000 * 20),
        "maxHashSlotNum": "20000", "maxIndexNum": "80000",
        "flushDiskType": "SYNC_FLUSH", "cleanResourceInterval": "100",
        "deleteCommitLogFilesInterval": "0", "defaultTopicQueueNums": "2",
        "diskPressurePolicy": policy})


def send(producer: Producer, n: int) -> list[str]:
    msgs = [Message("T", BODY) for _ in range(n)]
    return [r.message_id for r in producer.send_batch(msgs, timeout=10)]


def consume_all(consumer: SimpleConsumer, until_empty: int = 2) -> list[str]:
    ids: list[str] = []
    empty = 0
    while empty < until_empty:
        got = consumer.receive(64, invisible_duration=60, await_duration=0.5)
        if not got:
            empty += 1
            continue
        empty = 0
        consumer.ack_many(got)
        ids += [m.message_id for m in got]
    return ids


def fill(producer: Producer, max_messages: int, refused_in_a_row: int = 15
         ) -> tuple[list[str], int, str]:
    """Send batches until `refused_in_a_row` consecutive refusals or `max_messages` acked."""
    acked: list[str] = []
    refused, streak, reason = 0, 0, ""
    while streak < refused_in_a_row and len(acked) < max_messages:
        try:
            acked += send(producer, BATCH)
            streak = 0
        except ClientError as e:
            refused += 1
            streak += 1
            reason = str(e)
            time.sleep(0.1)
    return acked, refused, reason


def run(tmp_path, volume, policy: str) -> dict:
    vol = volume(48)
    node = small_node(tmp_path, vol, policy).start()
    try:
        conn = Connection(node.address)
        producer = Producer(conn, ["T"], retry=NO_RETRY)
        consumer = SimpleConsumer(conn, "G", {"T": "*"})
        first = send(producer, BATCH)  # the group subscribes and consumes these, then lags
        assert sorted(consume_all(consumer)) == sorted(first)
        acked, refused, reason = fill(producer, max_messages=12_000)
        acked = first + acked
        caught_up_at = time.monotonic()
        received = first + consume_all(consumer)
        resumed_after = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                acked += send(producer, 1)
                resumed_after = time.monotonic() - caught_up_at
                break
            except ClientError:
                time.sleep(0.05)
        received += consume_all(consumer)  # the message that showed the resume
        log = node.log_text()
        deleted_unconsumed = sum(int(n) for n in re.findall(
            r"removes unconsumed messages \([^)]*\): G \((\d+) messages\)", log))
        lost = len(set(acked) - set(received))
        figures = dict(policy=policy, acknowledged=len(acked), received=len(set(received)),
                       lost=lost, deleted_unconsumed_logged=deleted_unconsumed,
                       refused_batches=refused, resume_s=resumed_after, reason=reason[:300])
        print("\n", figures)
        conn.close()
        return figures
    finally:
        node.stop()


def test_protect_unconsumed_refuses_and_resumes(tmp_path, volume):
    f = run(tmp_path, volume, "protect-unconsumed")
    assert f["lost"] == 0, f  # nothing acknowledged and unconsumed was deleted
    assert f["deleted_unconsumed_logged"] == 0, f
    assert f["refused_batches"] > 0, f
    assert "DISK_FULL" in f["reason"] and "G (" in f["reason"], f  # names the group
    assert f["resume_s"] is not None, f  # writes resumed once the group caught up


def test_delete_oldest_counts_deleted_unconsumed(tmp_path, volume):
    f = run(tmp_path, volume, "delete-oldest")
    assert f["lost"] > 0, f  # RocketMQ's rule: the oldest unconsumed files went
    assert f["deleted_unconsumed_logged"] == f["lost"], f  # and every one was counted
    assert f["resume_s"] is not None, f


def test_small_volume_startup_check(tmp_path, volume):
    vol = volume(256)
    node = NodeProcess(str(tmp_path), "defaults", {"storePathRootDir": os.path.join(vol, "s")})
    del node.props["mappedFileSizeCommitLog"]  # the harness's 1 MiB: use the default 1 GiB
    node.start(wait_ready=False)
    code = node.wait_exit(30)
    assert code != 0
    text = node.log_text()
    assert "Lower mappedFileSizeCommitLog" in text, text[-2000:]
    fit = int(re.search(r"Lower mappedFileSizeCommitLog \(now \d+\) to at most (\d+)",
                        text).group(1))
    assert 0 < fit < 256 * 1024 * 1024
    ok = NodeProcess(str(tmp_path), "lowered", {"storePathRootDir": os.path.join(vol, "ok"),
                                               "mappedFileSizeCommitLog": str(fit)}).start()
    try:
        conn = Connection(ok.address)
        ids = send(Producer(conn, ["T"], retry=NO_RETRY), BATCH)  # the index: default geometry
        assert len(ids) == BATCH
        index_dir = os.path.join(vol, "ok", "index")
        wait_until(lambda: os.path.isdir(index_dir) and os.listdir(index_dir), 30,
                   "reput to write the index")
        sizes = [os.path.getsize(os.path.join(index_dir, n)) for n in os.listdir(index_dir)]
        assert sizes and max(sizes) < 64 * 1024 * 1024, sizes  # not ~420 MB up front
        conn.close()
    finally:
        ok.stop()

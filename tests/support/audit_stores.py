"""Replica stores for the audit tests: produced once by a REAL replicated run (a SYNC_MASTER and
two slaves as `python -m cluster node` processes, stopped cleanly with SIGTERM), then copied per
test and damaged in the copy. Helpers here inject the damage the audit must find.

The run creates its topics with Admin CreateTopic (records of the replicated topic table), sends
over the Admin API, then one consumer group receives and acks part of AuditOrders through the
RocketMQ 5 API (enough events for a consumer-state snapshot) and another group's offset of one
AuditPayments queue is reset over the Admin API (records of the consumer state table)."""
from __future__ import annotations

import json
import os
import shutil
import struct
import time
import uuid

from cluster.audit import replica_files
from cluster.client import ClientConfig, Connection, SimpleConsumer
from cluster.metadata.topic_state import upsert_event
from ha.epoch import EpochCache
from proto import admin_pb2 as pb
from store import codec
from store.codec import Message
from store.config import StoreConfig
from store.checkpoint import StoreCheckpoint
from store.epoch_file import EpochFile
from store.json_config import TopicConfig
from store.layout import (CHECKPOINT_FILE, COMMITLOG_DIR, CONFIG_DIR, CONSUME_QUEUE_DIR,
                          CONSUMER_OFFSET_FILE, EPOCH_FILE, LOCK_FILE)
from store.message_store import MessageStore
from store.readonly import StoreReader
from tests.integration.harness import FAST_HA, Group, free_port, in_sync, wait_until

TOPICS = {"AuditOrders": 4, "AuditPayments": 3, "AuditLogs": 2}
PER_TOPIC = 1500
DUP_KEY = "AUDIT-DUPLICATE-UNIQ-KEY"
NAMES = ("master", "slave1", "slave2")
CONSUMERS = ("audit-consumers", "AuditOrders", 1100)  # group, topic, messages received and acked
RESET = ("audit-resetters", "AuditPayments", 0, 100)  # group, topic, queue, offset set by a reset
# Small files: 1 MiB commitlog files (several per store), 300-unit consume queue files (several
# per queue) and a small index, so that copying three stores per test stays cheap.
SMALL = {"mappedFileSizeConsumeQueue": str(300 * 20), "maxHashSlotNum": "1000",
         "maxIndexNum": "4000", **FAST_HA}


def _batch(topic: str, queues: int, start: int, n: int) -> list[pb.Message]:
    return [pb.Message(topic=topic, queue_id=(start + i) % queues, keys=f"{topic}-key-{start + i}",
                       tags="TagA" if (start + i) % 3 else "TagB", unique_key=uuid.uuid4().hex.upper(),
                       body=(f"{topic}-{start + i}-".encode() + b"x" * (200 + (start + i) % 300)))
            for i in range(n)]


def produce(root: str) -> dict[str, str]:
    """Run the group, write a few thousand messages over several topics and queues (plus one
    unique key sent twice into the same queue), wait until every slave holds, confirms and
    dispatched everything, stop all nodes with SIGTERM. Returns {name: store dir}."""
    group = Group(root)
    try:
        m = group.master("SYNC_MASTER", **SMALL)
        slaves = [group.slave(m, 1, **SMALL), group.slave(m, 2, **SMALL)]
        wait_until(in_sync(m, 2), 30, "both slaves in sync")
        client = m.admin()
        for topic, queues in TOPICS.items():
            client.create_topic(topic, queue_nums=queues)
        for start in range(0, PER_TOPIC, 100):
            for topic, queues in TOPICS.items():
                r = client.send(_batch(topic, queues, start, 100))
                assert r.status == "PUT_OK", (r.status, r.reason)
        dup = [pb.Message(topic="AuditLogs", queue_id=1, keys="dup", unique_key=DUP_KEY,
                          body=b"sent twice by an at-least-once producer") for _ in range(2)]
        for msg in dup:
            assert client.send([msg]).status == "PUT_OK"
        consumers, topic, count = CONSUMERS
        assert consume(m.address, consumers, topic, count) == count
        resetters, topic, qid, offset = RESET
        client.upsert_group(resetters)
        client.reset_offset(resetters, topic, queue_id=qid, offset=offset)
        time.sleep(2.5)  # the table service (one step a second) writes the due snapshot
        top = m.status().max_offset
        nodes = [m, *slaves]
        wait_until(lambda: all(n.status().max_offset == top and n.status().confirm_offset == top
                               and n.status().dispatched_offset == top for n in nodes),
                   30, "every node holds, confirms and dispatched everything")
        for s in slaves:
            assert s.stop() == 0, s.log_tail()
        assert m.stop() == 0, m.log_tail()
        return {name: node.store_dir for name, node in zip(NAMES, nodes)}
    finally:
        group.close()


def consume(address: str, group: str, topic: str, count: int, timeout: float = 60) -> int:
    """Receive and ack `count` messages of `topic` for `group` (RocketMQ 5 SimpleConsumer)."""
    got = 0
    with Connection(ClientConfig(address, request_timeout=10)) as conn:
        consumer = SimpleConsumer(conn, group, {topic: "*"}, await_duration=1, invisible_duration=60)
        deadline = time.monotonic() + timeout
        while got < count and time.monotonic() < deadline:
            msgs = consumer.receive(min(32, count - got))
            for m in msgs:  # one AckMessage (one `acks` record) each: enough for a snapshot
                consumer.ack(m)
            got += len(msgs)
    return got


def copy_stores(stores: dict[str, str], dest: str) -> dict[str, str]:
    out = {}
    for name, path in stores.items():
        out[name] = os.path.join(dest, name)
        shutil.copytree(path, out[name], ignore=shutil.ignore_patterns(LOCK_FILE))
    return out


def write_consumer_offsets(store_dir: str, table: dict[str, dict[int, int]]) -> None:
    """config/consumerOffset.json in RocketMQ's format: {"offsetTable": {"topic@group": {"0": 12}}}."""
    os.makedirs(os.path.join(store_dir, CONFIG_DIR), exist_ok=True)
    data = {"offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in table.items()}}
    with open(os.path.join(store_dir, CONFIG_DIR, CONSUMER_OFFSET_FILE), "w", encoding="utf-8") as f:
        json.dump(data, f)


# -- damage ---------------------------------------------------------------------------------------
def cq_unit_path(store_dir: str, topic: str, queue_id: int, index: int) -> tuple[str, int]:
    """(file, byte position) of a consume queue unit."""
    directory = os.path.join(store_dir, CONSUME_QUEUE_DIR, topic, str(queue_id))
    files = sorted(os.listdir(directory))
    size = os.path.getsize(os.path.join(directory, files[0]))
    pos = index * 20
    for name in files:
        if int(name) <= pos < int(name) + size:
            return os.path.join(directory, name), pos - int(name)
    raise AssertionError(f"no file holds unit {index} of {topic}-{queue_id}")


def read_cq_unit(store_dir: str, topic: str, queue_id: int, index: int) -> tuple[int, int, int]:
    path, pos = cq_unit_path(store_dir, topic, queue_id, index)
    with open(path, "rb") as f:
        f.seek(pos)
        return struct.unpack(">qiq", f.read(20))


def write_cq_unit(store_dir: str, topic: str, queue_id: int, index: int, unit: tuple[int, int, int]) -> None:
    path, pos = cq_unit_path(store_dir, topic, queue_id, index)
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(struct.pack(">qiq", *unit))


def _commitlog_file(store_dir: str, offset: int) -> tuple[str, int]:
    directory = os.path.join(store_dir, COMMITLOG_DIR)
    for name in sorted(os.listdir(directory), reverse=True):
        if int(name) <= offset:
            return os.path.join(directory, name), offset - int(name)
    raise AssertionError(f"no commitlog file holds {offset}")


def flip_body_byte(store_dir: str, topic: str, queue_id: int, index: int) -> int:
    """Flip one byte inside the body of the record a consume queue unit points at (the record
    stays structurally valid; its body CRC no longer matches). Returns its offset."""
    phys, size, _ = read_cq_unit(store_dir, topic, queue_id, index)
    path, pos = _commitlog_file(store_dir, phys)
    with open(path, "r+b") as f:
        f.seek(pos)
        rec = codec.decode(f.read(size))
        assert isinstance(rec, codec.MessageRecord) and rec.physical_offset == phys
        at = pos + codec.header_size(rec.sys_flag) + 3
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0xFF]))
    return phys


def store_config(store_dir: str) -> StoreConfig:
    return StoreConfig(store_path_root_dir=store_dir, mapped_file_size_commit_log=1024 * 1024,
                       mapped_file_size_consume_queue=300 * 20, max_hash_slot_num=1000,
                       max_index_num=4000, listen_port=free_port())


def write_after_failover(store_dir: str, epoch: int, n: int, topic: str = "AuditOrders") -> tuple[int, int]:
    """What a replica elected master in `epoch` does: record the epoch at its end and append
    `n` messages (opened in this process with MessageStore). Returns (start, end)."""
    store = MessageStore(store_config(store_dir))
    store.start()
    try:
        start = store.max_phy_offset()
        msgs = [Message(topic, f"after failover, epoch {epoch}, #{i}".encode() * 4, i % TOPICS[topic],
                        {"KEYS": f"failover-{epoch}-{i}", "TAGS": "TagA",
                         "UNIQ_KEY": uuid.uuid4().hex.upper()}) for i in range(n)]
        assert store.put_messages(msgs).status.name == "PUT_OK"
        end = store.max_phy_offset()
        wait_until(lambda: store.reput.behind() == 0, 10, "the new records dispatched")
    finally:
        store.shutdown()
    epochs = EpochFile(os.path.join(store_dir, EPOCH_FILE))
    cache = EpochCache.from_entries(epochs.load())
    cache.append(epoch, start)
    epochs.save(cache)
    return start, end


def append_table_event(store_dirs: list[str], records, event: dict) -> tuple[int, int]:
    """Append one event of a replicated table (its record format, table_records.py) at the end
    of the first store, and the same bytes verbatim at the same offset of the others (as
    replication would: every store must end at the same offset). Returns (start, end)."""
    msg = records.to_message(event)
    data = None
    for i, store_dir in enumerate(store_dirs):
        store = MessageStore(store_config(store_dir))
        store.start()
        try:
            if i == 0:
                start = store.max_phy_offset()
                r = store.put_messages([msg], allow_system_topic=True)
                assert r.status.name == "PUT_OK" and r.appends[0].wrote_offset == start, r
                end = store.max_phy_offset()
                path, pos = _commitlog_file(store_dir, start)
                with open(path, "rb") as f:
                    f.seek(pos)
                    data = f.read(end - start)
            else:
                assert store.max_phy_offset() == start, (store_dir, store.max_phy_offset(), start)
                store.append_raw(start, data)
            wait_until(lambda: store.reput.behind() == 0, 10, "the table record dispatched")
        finally:
            store.shutdown()
    return start, end


def topic_upsert(topic: str, queues: int) -> dict:
    """A topic table `upsert` event (Admin UpdateTopic's) for `topic` with `queues` queues."""
    config = TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues)
    return upsert_event(config, int(time.time() * 1000), "admin")


def offset_event(group: str, topic: str, queue_id: int, offset: int) -> dict:
    """A consumer state `offset` event (UpdateOffset / a reset)."""
    return {"kind": "offset", "group": group, "topic": topic, "queue": queue_id, "offset": offset}


def set_confirm_offset(store_dir: str, offset: int) -> None:
    """Write the checkpoint's confirm offset as is (even past the store's end: damage)."""
    cp = StoreCheckpoint.load(os.path.join(store_dir, CHECKPOINT_FILE))
    cp.confirm_phy_offset = offset
    cp.flush()


def put_raw(store_dir: str, msgs: list[Message]) -> tuple[int, int]:
    """Append messages with MessageStore alone (no topic table, no replication): (start, end)."""
    store = MessageStore(store_config(store_dir))
    store.start()
    try:
        start = store.max_phy_offset()
        assert store.put_messages(msgs).status.name == "PUT_OK"
        end = store.max_phy_offset()
        wait_until(lambda: store.reput.behind() == 0, 10, "the new records dispatched")
    finally:
        store.shutdown()
    return start, end


def first_record_at_or_after(store_dir: str, target: int) -> int:
    with StoreReader(store_dir) as reader:
        for offset, _, _, _ in reader.scan(target - target % (1024 * 1024), check_crc=False):
            if offset >= target:
                return offset
    raise AssertionError(f"no record at or after {target}")


def bait_split_boundary(store_dir: str, topic: str, queue_id: int, target: int) -> int:
    """Make the queue's first unit at or after `target` point one byte before the record that
    follows `target` (inside the previous record): the audit's split planner picks it as a
    boundary, the executor finds no record there and the file is scanned again whole."""
    bait = first_record_at_or_after(store_dir, target) - 1
    assert bait >= target
    index = 0
    while read_cq_unit(store_dir, topic, queue_id, index)[0] < target:
        index += 1
    phys, size, tag = read_cq_unit(store_dir, topic, queue_id, index)
    write_cq_unit(store_dir, topic, queue_id, index, (bait, size, tag))
    return bait


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPLIT = 256 * 1024  # small ranges, so that the 1 MiB commitlog files are split into 4 tasks
BUCKET = 64 * 1024  # small digest buckets, so that only parts of the damaged stores are decoded again


def layouts_of(dirs: dict[str, str]) -> list[replica_files.ReplicaLayout]:
    return [replica_files.discover(path, name) for name, path in dirs.items()]


def by_kind(result, kind: str, replica: str | None = None) -> list[dict]:
    return [f for f in result.examples
            if f["kind"] == kind and (replica is None or f["replica"] == replica)]

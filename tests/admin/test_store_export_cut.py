"""StoreExport over an in-process store whose reput is stepped by hand: the consume queues of
the copy are all as of one dispatch position, even when reput dispatches more between the
measurement of one queue and the next (as it does on a busy node)."""
from __future__ import annotations

import contextlib
import os

import pytest

from cluster.admin.store_export import StoreExport
from store import running_flags as rf
from store.codec import Message
from store.config import StoreConfig
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, bytes_before
from store.message_store import MessageStore
from store.readonly.store_reader import StoreReader
from store.readonly.verify import verify_store

RECORDS = 40


@contextlib.contextmanager
def _stepped_store(root: str, commitlog_bytes: int, cq_units: int):
    """A loaded store, writable without its service threads (reput is stepped by the test)."""
    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=commitlog_bytes,
                         mapped_file_size_consume_queue=CQ_STORE_UNIT_SIZE * cq_units,
                         max_hash_slot_num=64, max_index_num=256)
    s = MessageStore(config)
    s.load()
    s.flags.clear(rf.NOT_STARTED)
    try:
        yield s
    finally:
        s.shutdown()


@pytest.fixture
def store(tmp_path):
    with _stepped_store(str(tmp_path / "node"), 64 * 1024, 8) as s:
        yield s


def _put(store: MessageStore) -> list[int]:
    """RECORDS records alternating between topics A and B; their commitlog offsets."""
    offsets = []
    for i in range(RECORDS):
        r = store.put_message(Message("AB"[i % 2], f"body-{i}".encode() * 20, 0,
                                      {"KEYS": f"k{i}"}))
        offsets.append(r.appends[0].wrote_offset)
    return offsets


def _materialize(export: StoreExport, dest: str) -> None:
    """Write the stream's files like the admin client does (each extended to its length)."""
    files = {}
    for msg in export.messages():
        which = msg.WhichOneof("payload")
        if which == "manifest":
            files = {f.path: f for f in msg.manifest.files}
        elif which == "chunk":
            path = os.path.join(dest, *msg.chunk.path.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "r+b" if msg.chunk.offset else "wb") as f:
                f.seek(msg.chunk.offset)
                f.write(msg.chunk.data)
                if msg.chunk.file_done:
                    f.truncate(files[msg.chunk.path].file_length)


def _reput_between_queues(store: MessageStore, topic: str) -> None:
    """Reput catches up right before `topic`'s queue files are listed by the export."""
    mfq = store.cq_store.find(topic, 0).mfq
    listed = mfq.snapshot

    def after_reput():
        store.reput.catch_up()
        return listed()

    mfq.snapshot = after_reput


def _units(dest: str, topic: str) -> list[int]:
    with StoreReader(dest) as reader:
        q = reader.queue(topic, 0)
        return [] if q is None else [u[0] for f in q.files for _, u in q.iter_units(f)]


def test_queues_measured_while_reput_runs_are_cut_to_one_dispatch_position(store, tmp_path):
    offsets = _put(store)
    half = offsets[RECORDS // 2]
    store.reput.dispatch_available(max_bytes=half - offsets[0])
    assert store.reput.reput_from_offset == half
    _reput_between_queues(store, "B")  # A is measured at `half`, B after reput caught up
    dest = str(tmp_path / "copy")
    _materialize(StoreExport(store), dest)

    with StoreReader(dest) as reader:
        report = verify_store(reader, index_sample=0)
    assert report["ok"], report["issues"]
    assert report["consume_queues"]["dispatched_end"] == half
    assert _units(dest, "A") == offsets[0:RECORDS // 2:2]
    assert _units(dest, "B") == offsets[1:RECORDS // 2:2]  # not B's units dispatched since
    assert store.cq_store.find("B", 0).max_offset() == RECORDS // 2  # the node's queue has them


def test_a_queue_file_holding_only_later_units_is_not_sent(store, tmp_path):
    offsets = _put(store)
    store.reput.dispatch_available(max_bytes=offsets[4] - offsets[0])  # A and B: 2 units each
    _reput_between_queues(store, "B")  # B then holds 20 units: 3 files of 8
    export = StoreExport(store)
    dest = str(tmp_path / "copy")
    _materialize(export, dest)
    sent = sorted(os.listdir(os.path.join(dest, "consumequeue", "B", "0")))
    assert sent == ["00000000000000000000"]
    assert len(store.cq_store.find("B", 0).mfq.snapshot()) == 3
    assert _units(dest, "B") == offsets[1:4:2]


def test_bytes_before_counts_the_whole_units_before_the_cut(store):
    offsets = _put(store)
    store.reput.catch_up()
    mf = store.cq_store.find("A", 0).mfq.snapshot()[0]  # A's first 8 units
    size = mf.read_position
    assert bytes_before(mf, offsets[0], size) == 0
    assert bytes_before(mf, offsets[1], size) == CQ_STORE_UNIT_SIZE
    assert bytes_before(mf, offsets[6], size) == 3 * CQ_STORE_UNIT_SIZE
    assert bytes_before(mf, offsets[-1] + 1, size) == size
    assert bytes_before(mf, offsets[-1] + 1, size - 7) == size - CQ_STORE_UNIT_SIZE


def test_bytes_before_reads_back_across_chunks(tmp_path):
    with _stepped_store(str(tmp_path / "big"), 1024 * 1024, 400) as s:
        offsets = [s.put_message(Message("A", b"x" * 50, 0)).appends[0].wrote_offset
                   for _ in range(300)]
        s.reput.catch_up()
        mf = s.cq_store.find("A", 0).mfq.snapshot()[0]
        size = mf.read_position
        for cut in (0, 1, 10, 63, 64, 65, 200, 299):  # 64 units per read, from the end
            assert bytes_before(mf, offsets[cut], size) == cut * CQ_STORE_UNIT_SIZE
        assert bytes_before(mf, offsets[-1] + 1, size) == size

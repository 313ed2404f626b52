"""IndexFile: RocketMQ byte layout both ways, hash rules, chains, time filters, undo."""
from __future__ import annotations

import errno
import os
import struct

import pytest

from store.errors import CorruptFile, DiskError
from store.commitlog.fileio import FileIO
from store.index.index_file import IndexFile, index_file_size, index_key_hash

SLOTS, ENTRIES = 4, 4
SIZE = 40 + SLOTS * 4 + ENTRIES * 20
T0 = 1_700_000_000_000
NAME = "20231114221320000"


def java_hash(s: str) -> int:
    """String.hashCode written out independently of store.codec (ASCII keys only)."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def rocketmq_key_hash(s: str) -> int:
    h = abs(java_hash(s))
    return 0 if h == 1 << 31 else h


def same_slot_keys() -> tuple[str, str]:
    first = "TopicTest#order-1"
    slot = rocketmq_key_hash(first) % SLOTS
    for i in range(2, 100):
        other = f"TopicTest#order-{i}"
        if rocketmq_key_hash(other) % SLOTS == slot:
            return first, other
    raise AssertionError("no second key in the slot")


K1, K2 = same_slot_keys()


def golden() -> bytes:
    """Two entries chained in one slot, assembled by hand from the layout table."""
    h1, h2 = rocketmq_key_hash(K1), rocketmq_key_hash(K2)
    slot = h1 % SLOTS
    header = struct.pack(">qqqqii", T0, T0 + 3000, 4096, 4283, 1, 3)
    slots = b"".join(struct.pack(">i", 2 if i == slot else 0) for i in range(SLOTS))
    entries = (bytes(20)
               + struct.pack(">iqii", h1, 4096, 0, 0)
               + struct.pack(">iqii", h2, 4283, 3, 1)
               + bytes(20))
    return header + slots + entries


def test_key_hash_rules():
    assert index_key_hash("TopicTest#order-1") == rocketmq_key_hash("TopicTest#order-1")
    assert java_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert index_key_hash("polygenelubricants") == 0
    neg = next(k for k in (f"k{i}" for i in range(10_000)) if java_hash(f"T#{k}") < 0)
    assert index_key_hash(f"T#{neg}") == -java_hash(f"T#{neg}")
    assert index_file_size(SLOTS, ENTRIES) == SIZE


def test_golden_file_parsed_and_queried(tmp_path):
    path = tmp_path / NAME
    path.write_bytes(golden())
    f = IndexFile(str(path), SLOTS, ENTRIES, FileIO())
    assert (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset,
            f.hash_slot_count, f.index_count) == (T0, T0 + 3000, 4096, 4283, 1, 3)
    assert f.select_phy_offsets(K1, 10, 0, 2**62) == [4096]
    assert f.select_phy_offsets(K2, 10, 0, 2**62) == [4283]
    assert f.select_phy_offsets(K2, 10, T0 + 3001, 2**62) == []
    assert f.select_phy_offsets(K1, 10, T0, T0) == [4096]
    assert f.select_phy_offsets("TopicTest#absent", 10, 0, 2**62) == []
    assert f.is_full is False
    f.close()


def test_code_writes_golden_bytes(tmp_path):
    f = IndexFile(str(tmp_path / NAME), SLOTS, ENTRIES, FileIO(), create=True)
    assert f.put_key(K1, 4096, T0)
    assert f.put_key(K2, 4283, T0 + 3000)
    f.flush()
    f.close()
    assert (tmp_path / NAME).read_bytes() == golden()


def test_full_file_refuses_and_chain_is_newest_first(tmp_path):
    f = IndexFile(str(tmp_path / NAME), SLOTS, ENTRIES, FileIO(), create=True)
    assert [f.put_key("T#a", p, T0 + p) for p in (0, 1000, 2000)] == [True] * 3
    assert f.is_full and not f.put_key("T#a", 3000, T0 + 3000)
    assert f.select_phy_offsets("T#a", 10, 0, 2**62) == [2000, 1000, 0]
    assert f.select_phy_offsets("T#a", 2, 0, 2**62) == [2000, 1000]
    assert f.select_phy_offsets("T#a", 10, T0 + 1000, T0 + 1000) == [1000]
    assert f.select_phy_offsets("T#a", 10, 0, 2**62, max_phy_offset=2000) == [1000, 0]
    assert f.select_phy_offsets("T#a", 10, 0, 2**62, skip={1000}) == [2000, 0]
    assert f.hash_slot_count == 1 and f.index_count == 4


def test_new_file_continues_previous_and_time_match(tmp_path):
    f = IndexFile(str(tmp_path / NAME), SLOTS, ENTRIES, FileIO(), create=True,
                  end_phy_offset=777, end_timestamp=T0)
    assert (f.begin_phy_offset, f.end_phy_offset, f.begin_timestamp, f.end_timestamp) == (
        777, 777, T0, T0)
    f.put_key("T#x", 800, T0 + 5000)
    f.put_key("T#y", 900, T0 + 9000)
    # Entry 1 re-anchors the file: begin = its own time and offset, timeDiff 0.
    assert (f.begin_phy_offset, f.begin_timestamp) == (800, T0 + 5000)
    assert f.entry(1)[2] == 0 and f.entry(2)[2] == 4
    assert f.is_time_matched(0, T0 + 5000) and f.is_time_matched(T0 + 9000, 2**62)
    assert f.is_time_matched(T0 + 6000, T0 + 7000) and f.is_time_matched(0, 2**62)
    assert not f.is_time_matched(0, T0 + 4999) and not f.is_time_matched(T0 + 9001, 2**62)


def test_truncate_from_restores_the_exact_bytes(tmp_path):
    path = tmp_path / NAME
    f = IndexFile(str(path), 8, 16, FileIO(), create=True)
    for i in range(6):
        f.put_key(f"T#k{i % 3}", 100 * i, T0 + 1000 * i)
    f.flush()
    snapshot = path.read_bytes()
    for i in range(6, 11):
        f.put_key(f"T#k{i % 4}", 100 * i, T0 + 1000 * i)
    assert f.truncate_from(600) == 5
    assert path.read_bytes() == snapshot
    assert (f.index_count, f.end_phy_offset, f.end_timestamp) == (7, 500, T0 + 5000)
    assert f.truncate_from(0) == 6 and f.index_count == 1 and f.hash_slot_count == 0
    assert f.select_phy_offsets("T#k0", 10, 0, 2**62) == []


def test_unflushed_header_and_stale_slot(tmp_path):
    # A RocketMQ file whose header was never flushed: zeros; indexCount reads as 1.
    data = bytearray(golden())
    data[:40] = bytes(40)
    path = tmp_path / NAME
    path.write_bytes(bytes(data))
    f = IndexFile(str(path), SLOTS, ENTRIES, FileIO())
    assert f.index_count == 1
    assert f.select_phy_offsets(K2, 10, 0, 2**62) == []  # slot 2 >= indexCount: stale
    assert f.put_key(K1, 9000, T0)
    assert f.entry(1)[3] == 0  # the stale slot is not linked
    assert f.select_phy_offsets(K1, 10, 0, 2**62) == [9000]


def test_damaged_chain_terminates(tmp_path):
    data = bytearray(golden())
    h2 = rocketmq_key_hash(K2)
    struct.pack_into(">iqii", data, 40 + SLOTS * 4 + 1 * 20, h2, 4096, 0, 2)  # 1 -> 2 loop
    path = tmp_path / NAME
    path.write_bytes(bytes(data))
    f = IndexFile(str(path), SLOTS, ENTRIES, FileIO())
    assert f.select_phy_offsets(K2, 10, 0, 2**62) == [4283, 4096]


def test_wrong_size_is_corrupt(tmp_path):
    (tmp_path / NAME).write_bytes(b"\0" * 10)
    with pytest.raises(CorruptFile):
        IndexFile(str(tmp_path / NAME), SLOTS, ENTRIES, FileIO())


class FailMsync(FileIO):
    def _check(self, op: str, path: str) -> None:
        if op == "msync":
            raise OSError(errno.EIO, "injected", path)


def test_failed_flush_raises_and_stays_dirty(tmp_path):
    f = IndexFile(str(tmp_path / NAME), SLOTS, ENTRIES, FailMsync(), create=True)
    f.put_key("T#a", 1, T0)
    with pytest.raises(DiskError):
        f.flush()
    assert f.dirty
    assert f.destroy(0, 0) and not os.path.exists(tmp_path / NAME)


def test_put_entries_writes_the_same_bytes_as_put_key(tmp_path):
    """put_entries (reput's batch path) must leave exactly the bytes of put_key one by one,
    including a stale slot, a key whose hash is Integer.MIN_VALUE and a file filling up."""
    slots, entries = 7, 9
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = IndexFile(str(tmp_path / "a" / NAME), slots, entries, create=True)
    many = IndexFile(str(tmp_path / "b" / NAME), slots, entries, create=True)
    for f in (one, many):  # a stale slot pointing past indexCount
        struct.pack_into(">i", f._mm, 40 + 3 * 4, 8)
    records = [(["polygenelubricants", "T#k1"], 100, T0), (["T#k2"], 200, T0 + 1500),
               (["T#k1", "T#k3", "T#k4"], 300, T0 - 5000), (["T#k5", "T#k6", "T#k7", "T#k8"], 400,
                                                             T0 + 10**13)]
    for keys, phy, ts in records:
        stored = 0
        for k in keys:
            if not one.put_key(k, phy, ts):
                break
            stored += 1
        assert many.put_entries([(k, phy, ts) for k in keys]) == stored
    assert one.is_full and many.is_full
    assert bytes(one._mm) == bytes(many._mm)
    assert (one.hash_slot_count, one.index_count, one.end_phy_offset, one.end_timestamp) == \
           (many.hash_slot_count, many.index_count, many.end_phy_offset, many.end_timestamp)
    one.close()
    many.close()

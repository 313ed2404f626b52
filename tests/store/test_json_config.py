"""JsonConfigFile (.bak fallback) and TopicConfigTable (RocketMQ topics.json format)."""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import threading

import pytest

from common.clock import ManualClock
from common.config_values import ConfigError
from store.errors import CorruptFile, DiskError
from store.commitlog.fileio import FileIO
from store.json_config import (PERM_INHERIT, PERM_READ, PERM_WRITE, JsonConfigFile, TopicConfig,
                               TopicConfigTable)
from store.layout import CONFIG_DIR, TOPICS_FILE


class FaultyIO(FileIO):
    def __init__(self, ops: dict[str, int], suffix: str = "") -> None:
        self.ops = ops
        self.suffix = suffix

    def _check(self, op: str, path: str) -> None:
        if op in self.ops and path.endswith(self.suffix):
            raise OSError(self.ops[op], os.strerror(self.ops[op]), path)


# -- JsonConfigFile ---------------------------------------------------------------------------
def test_round_trip_sorted_indented(tmp_path):
    path = tmp_path / "c.json"
    f = JsonConfigFile(str(path), FileIO())
    assert f.load() is None
    data = {"b": 1, "a": {"z": [1, 2], "y": "ü"}}
    f.persist(data)
    assert f.load() == data
    text = path.read_text("utf-8")
    assert text == json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert text.index('"a"') < text.index('"b"')
    assert not os.path.exists(f"{path}.bak")  # nothing to back up on the first write
    assert not os.path.exists(f"{path}.tmp")


def test_persist_keeps_previous_version_as_bak(tmp_path):
    path = tmp_path / "c.json"
    f = JsonConfigFile(str(path), FileIO())
    f.persist({"v": 1})
    f.persist({"v": 2})
    assert json.loads((tmp_path / "c.json.bak").read_text()) == {"v": 1}
    assert f.load() == {"v": 2}


@pytest.mark.parametrize("garbage", [b"", b"   \n", b'{"v": 2', b"[1, 2]", b"\xff\xfe\x00"])
def test_corrupt_main_falls_back_to_bak(tmp_path, garbage):
    path = tmp_path / "c.json"
    f = JsonConfigFile(str(path), FileIO())
    f.persist({"v": 1})
    f.persist({"v": 2})
    path.write_bytes(garbage)
    assert f.load() == {"v": 1}


def test_missing_main_falls_back_to_bak(tmp_path):
    (tmp_path / "c.json.bak").write_text('{"v": 1}')
    assert JsonConfigFile(str(tmp_path / "c.json"), FileIO()).load() == {"v": 1}


def test_corrupt_main_without_usable_bak_raises(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{nope")
    f = JsonConfigFile(str(path), FileIO())
    with pytest.raises(CorruptFile) as info:
        f.load()
    assert str(path) in str(info.value)
    (tmp_path / "c.json.bak").write_text("also bad")
    with pytest.raises(CorruptFile):
        f.load()


def test_persist_over_corrupt_main_does_not_clobber_good_bak(tmp_path):
    path = tmp_path / "c.json"
    f = JsonConfigFile(str(path), FileIO())
    f.persist({"v": 1})
    f.persist({"v": 2})
    path.write_text("garbage")
    f.persist({"v": 3})
    assert json.loads((tmp_path / "c.json.bak").read_text()) == {"v": 1}
    assert f.load() == {"v": 3}


def test_unreadable_main_uses_bak_else_disk_error(tmp_path):
    path = tmp_path / "c.json"
    ok_io = FileIO()
    JsonConfigFile(str(path), ok_io).persist({"v": 1})
    JsonConfigFile(str(path), ok_io).persist({"v": 2})
    # pread fails only on the main file: the .bak is still readable.
    assert JsonConfigFile(str(path), FaultyIO({"pread": errno.EIO}, suffix="c.json")).load() == {"v": 1}
    with pytest.raises(DiskError) as info:
        JsonConfigFile(str(path), FaultyIO({"pread": errno.EIO})).load()
    assert info.value.cause.errno == errno.EIO


def test_failed_persist_raises_disk_error_and_keeps_old(tmp_path):
    path = tmp_path / "c.json"
    JsonConfigFile(str(path), FileIO()).persist({"v": 1})
    f = JsonConfigFile(str(path), FaultyIO({"fsync": errno.EIO}, suffix="c.json.tmp"))
    with pytest.raises(DiskError):
        f.persist({"v": 2})
    assert JsonConfigFile(str(path), FileIO()).load() == {"v": 1}
    assert json.loads(path.read_text()) == {"v": 1}


def test_persist_creates_missing_directory(tmp_path):
    path = tmp_path / CONFIG_DIR / "c.json"
    JsonConfigFile(str(path), FileIO()).persist({"x": 1})
    assert json.loads(path.read_text()) == {"x": 1}


# -- TopicConfig ------------------------------------------------------------------------------
def test_topic_config_defaults():
    t = TopicConfig("TopicA")
    assert (t.read_queue_nums, t.write_queue_nums, t.perm, t.order) == (8, 8, 6, False)
    assert t.perm == PERM_READ | PERM_WRITE and t.readable and t.writable
    assert not TopicConfig("T", perm=PERM_READ | PERM_INHERIT).writable
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.perm = 4  # frozen


@pytest.mark.parametrize("kwargs", [
    {"topic_name": ""},
    {"topic_name": "has space"},
    {"topic_name": "x" * 128},
    {"topic_name": 5},
    {"topic_name": "T", "read_queue_nums": 0},
    {"topic_name": "T", "write_queue_nums": 1025},
    {"topic_name": "T", "read_queue_nums": 2.0},
    {"topic_name": "T", "write_queue_nums": True},
    {"topic_name": "T", "perm": 8},
    {"topic_name": "T", "perm": -1},
    {"topic_name": "T", "order": "yes"},
])
def test_topic_config_validation(kwargs):
    with pytest.raises(ConfigError):
        TopicConfig(**kwargs)


def test_topic_config_limits_accepted():
    TopicConfig("%RETRY%group_1-a|b", read_queue_nums=1, write_queue_nums=1024, perm=7)
    TopicConfig("x" * 127, perm=0)


# -- TopicConfigTable -------------------------------------------------------------------------
def test_topics_json_is_rocketmq_format(tmp_path):
    clock = ManualClock(start_ms=1_700_000_000_000)
    table = TopicConfigTable.for_store(str(tmp_path), FileIO(), clock)
    assert table.path == str(tmp_path / CONFIG_DIR / TOPICS_FILE)
    table.put(TopicConfig("TopicA", read_queue_nums=4, write_queue_nums=2, order=True))
    on_disk = json.loads((tmp_path / CONFIG_DIR / TOPICS_FILE).read_text())
    assert on_disk == {
        "topicConfigTable": {
            "TopicA": {
                "topicName": "TopicA",
                "readQueueNums": 4,
                "writeQueueNums": 2,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": True,
                "attributes": {},
            }
        },
        "dataVersion": {"timestamp": 1_700_000_000_000, "counter": 1},
    }


def test_put_get_delete_and_data_version(tmp_path):
    clock = ManualClock(start_ms=1000)
    path = str(tmp_path / TOPICS_FILE)
    table = TopicConfigTable(path, FileIO(), clock)
    assert table.get("A") is None and table.all() == [] and table.data_version == (0, 0)
    table.put(TopicConfig("B"))
    clock.advance(1)
    table.put(TopicConfig("A", perm=PERM_READ))
    assert [t.topic_name for t in table.all()] == ["A", "B"]
    assert table.get("A").perm == PERM_READ
    assert table.data_version == (2000, 2)
    clock.advance(1)
    assert table.delete("B") is True
    assert table.delete("B") is False  # absent: nothing written, version unchanged
    assert table.data_version == (3000, 3)

    reloaded = TopicConfigTable(path, FileIO(), clock)
    assert reloaded.load() is True
    assert reloaded.all() == [TopicConfig("A", perm=PERM_READ)]
    assert reloaded.data_version == (3000, 3)


def test_load_missing_is_empty(tmp_path):
    table = TopicConfigTable(str(tmp_path / TOPICS_FILE), FileIO(), ManualClock())
    assert table.load() is False and table.all() == []


def test_table_load_uses_bak_when_main_corrupt(tmp_path):
    path = tmp_path / TOPICS_FILE
    clock = ManualClock()
    table = TopicConfigTable(str(path), FileIO(), clock)
    table.put(TopicConfig("A"))
    table.put(TopicConfig("B"))
    path.write_text('{"topicConfigTable": {')
    reloaded = TopicConfigTable(str(path), FileIO(), clock)
    assert reloaded.load()
    assert [t.topic_name for t in reloaded.all()] == ["A"]
    assert reloaded.data_version[1] == 1


def test_table_load_rejects_invalid_entries(tmp_path):
    path = tmp_path / TOPICS_FILE
    path.write_text(json.dumps({"topicConfigTable": {"A": {"topicName": "A", "perm": 9}}}))
    with pytest.raises(CorruptFile):
        TopicConfigTable(str(path), FileIO(), ManualClock()).load()
    path.write_text(json.dumps({"topicConfigTable": {"A": {"topicName": "B"}}}))
    with pytest.raises(CorruptFile):
        TopicConfigTable(str(path), FileIO(), ManualClock()).load()


def test_table_reads_rocketmq_file_with_extra_fields(tmp_path):
    path = tmp_path / TOPICS_FILE
    path.write_text(json.dumps({
        "dataVersion": {"counter": 7, "stateVersion": 0, "timestamp": 123},
        "topicConfigTable": {"T": {"attributes": {}, "order": False, "perm": 7, "readQueueNums": 16,
                                   "topicFilterType": "SINGLE_TAG", "topicName": "T",
                                   "topicSysFlag": 0, "writeQueueNums": 16}},
    }))
    table = TopicConfigTable(str(path), FileIO(), ManualClock())
    assert table.load()
    assert table.get("T") == TopicConfig("T", 16, 16, 7, False)
    assert table.data_version == (123, 7)


def test_put_rejects_non_topic_config(tmp_path):
    table = TopicConfigTable(str(tmp_path / TOPICS_FILE), FileIO(), ManualClock())
    with pytest.raises(ConfigError):
        table.put({"topicName": "A"})


def test_failed_put_leaves_memory_and_disk_unchanged(tmp_path):
    path = str(tmp_path / TOPICS_FILE)
    clock = ManualClock()
    TopicConfigTable(path, FileIO(), clock).put(TopicConfig("A"))
    table = TopicConfigTable(path, FaultyIO({"rename": errno.ENOSPC}, suffix=TOPICS_FILE), clock)
    table.load()
    with pytest.raises(DiskError):
        table.put(TopicConfig("B"))
    assert [t.topic_name for t in table.all()] == ["A"] and table.data_version[1] == 1
    fresh = TopicConfigTable(path, FileIO(), clock)
    fresh.load()
    assert [t.topic_name for t in fresh.all()] == ["A"]


def test_concurrent_puts_are_all_persisted(tmp_path):
    path = str(tmp_path / TOPICS_FILE)
    table = TopicConfigTable(path, FileIO(), ManualClock())
    barrier = threading.Barrier(4)

    def worker(i: int) -> None:
        barrier.wait()
        for j in range(10):
            table.put(TopicConfig(f"T{i}_{j}"))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(table.all()) == 40 and table.data_version[1] == 40
    fresh = TopicConfigTable(path, FileIO(), ManualClock())
    fresh.load()
    assert len(fresh.all()) == 40 and fresh.data_version[1] == 40


def test_every_rocketmq_topic_field_is_kept(tmp_path):
    entry = {"topicName": "T", "readQueueNums": 8, "writeQueueNums": 6, "perm": 6, "order": True,
             "topicFilterType": "MULTI_TAG", "topicSysFlag": 3,
             "attributes": {"+message.type": "FIFO", "+cleanup.policy": "DELETE"}}
    config = TopicConfig.from_json(entry)
    assert config.attributes == (("+cleanup.policy", "DELETE"), ("+message.type", "FIFO"))
    assert config.to_json() == entry
    assert TopicConfig("T", attributes={"b": "1", "a": "2"}) == TopicConfig(
        "T", attributes=(("a", "2"), ("b", "1")))
    hash(config)  # a frozen value: usable as a key
    for bad in ({"topicFilterType": "SQL"}, {"topicSysFlag": -1}, {"attributes": {"a": 1}},
                {"attributes": ["a"]}):
        with pytest.raises(ConfigError):
            TopicConfig.from_json({"topicName": "T", **bad})

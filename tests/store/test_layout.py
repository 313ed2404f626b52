"""store.layout: the names of a store's files and the name rules of the numbered ones."""
from __future__ import annotations

import os
import time

from store import layout
from store.layout import StoreLayout

T0 = 1_700_000_000_000


def test_file_name_is_local_time_millis():
    ms = T0 + 42
    expected = time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + "042"
    assert layout.index_file_name(ms) == expected and len(expected) == 17
    assert layout.parse_index_file_name(expected) == ms
    assert layout.is_index_file_name(expected)
    assert not layout.is_index_file_name(expected[:-1]) and not layout.is_index_file_name(expected + ".tmp")


def test_offset_file_names_are_20_digits():
    assert layout.offset_file_name(0) == "00000000000000000000"
    assert layout.offset_file_name(1 << 30) == "00000000001073741824"
    assert layout.is_offset_file_name("00000000001073741824")
    for name in ("0000000000107374182", "0000000000107374182x", "00000000001073741824.tmp"):
        assert not layout.is_offset_file_name(name)


def test_rocketmq_names_under_the_root():
    """The names RocketMQ uses, spelled out here independently of the module's constants."""
    root = os.path.join("data", "store")
    paths = StoreLayout(root)
    assert paths.commitlog_dir == os.path.join(root, "commitlog")
    assert paths.consume_queue_dir == os.path.join(root, "consumequeue")
    assert paths.queue_dir("T", 3) == os.path.join(root, "consumequeue", "T", "3")
    assert paths.index_dir == os.path.join(root, "index")
    assert paths.checkpoint == os.path.join(root, "checkpoint")
    assert paths.abort == os.path.join(root, "abort")
    assert paths.lock == os.path.join(root, "lock")
    assert paths.epoch_file == os.path.join(root, "epochFileCheckpoint")
    assert paths.config_dir == os.path.join(root, "config")
    assert paths.topics == os.path.join(root, "config", "topics.json")
    assert paths.delay_offset == os.path.join(root, "config", "delayOffset.json")
    assert paths.consumer_offset == os.path.join(root, "config", "consumerOffset.json")
    assert paths.subscription_group == os.path.join(root, "config", "subscriptionGroup.json")
    assert paths.admin_token == os.path.join(root, "config", "admin.token")


def test_atomic_write_and_backup_names():
    assert layout.tmp_path("x/checkpoint") == "x/checkpoint.tmp"
    assert layout.backup_path("x/config/topics.json") == "x/config/topics.json.bak"

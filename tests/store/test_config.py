"""StoreConfig: RocketMQ defaults and keys, validation, clamping, properties round trips."""
from __future__ import annotations

import dataclasses
import os
import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.config import (
    FIELD_BY_KEY,
    StoreConfig,
    key_for,
    load_config_file,
    parse_properties,
)
from common.config_values import ConfigError

ROCKETMQ_DEFAULTS = {
    "store_path_commit_log": "",
    "mapped_file_size_commit_log": 1024 * 1024 * 1024,
    "mapped_file_size_consume_queue": 300000 * 20,
    "max_hash_slot_num": 5_000_000,
    "max_index_num": 20_000_000,
    "max_message_size": 4 * 1024 * 1024,
    "max_properties_size": 32767,
    "max_topic_length": 127,
    "flush_disk_type": "ASYNC_FLUSH",
    "flush_interval_commit_log": 500,
    "flush_commit_log_least_pages": 4,
    "flush_commit_log_thorough_interval": 10000,
    "flush_commit_log_timed": False,
    "commit_interval_commit_log": 200,
    "commit_commit_log_least_pages": 4,
    "commit_commit_log_thorough_interval": 200,
    "transient_store_pool_enable": False,
    "transient_store_pool_size": 5,
    "write_without_mmap": False,
    "flush_interval_consume_queue": 1000,
    "flush_consume_queue_least_pages": 2,
    "flush_consume_queue_thorough_interval": 60000,
    "sync_flush_timeout": 5000,
    "slave_timeout": 3000,
    "file_reserved_time": 72,
    "delete_when": "04",
    "disk_max_used_space_ratio": 75,
    "disk_space_warning_level_ratio": 90,
    "disk_space_clean_forcibly_ratio": 85,
    "clean_resource_interval": 10000,
    "delete_commit_log_files_interval": 100,
    "delete_consume_queue_files_interval": 100,
    "destroy_mapped_file_interval_forcibly": 120000,
    "redelete_hanged_file_interval": 120000,
    "clean_file_forcibly_enable": True,
    "disk_pressure_policy": "protect-unconsumed",  # ours (issue 17); RocketMQ: delete-oldest
    "check_crc_on_recover": True,
    "force_verify_prop_crc": False,
    "enabled_append_prop_crc": False,
    "message_index_enable": True,
    "message_index_safe": False,
    "message_index_process_enable": False,  # ours: the index in a child process (nodes: on)
    "broker_role": "ASYNC_MASTER",
    "message_delay_level": "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
    "auto_message_version_on_topic_len": True,
    "broker_ip1": "127.0.0.1",
    "listen_port": 10911,
    "access_message_in_memory_max_ratio": 40,
    "max_transfer_bytes_on_message_in_memory": 256 * 1024,
    "max_transfer_count_on_message_in_memory": 32,
    "max_transfer_bytes_on_message_in_disk": 64 * 1024,
    "max_transfer_count_on_message_in_disk": 8,
    "default_query_max_num": 32,
    "max_msgs_num_batch": 64,
    "duplication_enable": False,
    "timer_max_delay_sec": 3 * 24 * 3600,
    "reput_batch_max_bytes": 4 * 1024 * 1024,
    "duplicate_window_seconds": 120,  # ours: JetStream's duplicate window (store/dedup/)
    "duplicate_window_max_entries": 500_000,  # ours: about 100 MB at ~205 bytes an entry
    "ha_master_address": "",
    "ha_send_heartbeat_interval": 5000,
    "ha_housekeeping_interval": 20000,
    "ha_transfer_batch_size": 1024 * 1024,  # ours: RocketMQ's 32 KiB is for raw TCP
    "ha_max_gap_not_in_sync": 256 * 1024 * 1024,
    "ha_max_time_slave_not_catchup": 15000,
    "in_sync_replicas": 1,
    "min_in_sync_replicas": 1,
    "all_ack_in_sync_state_set": False,
    "sync_from_last_file": False,
    "ha_max_in_flight_bytes": 8 * 1024 * 1024,  # ours
    "ha_reconnect_min_backoff": 200,  # ours
    "ha_reconnect_max_backoff": 5000,  # ours
    "ha_max_slave_ack_latency": 1000,  # ours: slow members (ha/ack_latency.py)
    "ha_slow_slave_latency_ratio": 4,
    "ha_slow_slave_min_latency": 50,
    "ha_slow_slave_detect_window": 1000,
    "ha_slow_slave_rejoin_time": 5000,
    "prefault_ahead_bytes": 16 * 1024 * 1024,  # ours: store/commitlog/prefault.py
}


# ---- defaults and keys ----

def test_defaults_match_rocketmq() -> None:
    cfg = StoreConfig()
    actual = {name: getattr(cfg, name) for name in ROCKETMQ_DEFAULTS}
    assert actual == ROCKETMQ_DEFAULTS
    # Every field has a checked default: nothing slipped in untested.
    names = {f.name for f in dataclasses.fields(StoreConfig)}
    assert names - set(ROCKETMQ_DEFAULTS) == {"store_path_root_dir"}


def test_default_root_dir_follows_home(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = StoreConfig()
    assert cfg.store_path_root_dir == os.path.join(str(tmp_path), "store")
    assert cfg.commit_log_dir == os.path.join(str(tmp_path), "store", "commitlog")


def test_default_helpers() -> None:
    cfg = StoreConfig()
    assert cfg.delay_levels_ms() == (
        1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000,
        420000, 480000, 540000, 600000, 1200000, 1800000, 3600000, 7200000)
    assert cfg.store_host == "127.0.0.1:10911"
    assert cfg.delete_hours() == frozenset({4})
    assert not cfg.is_sync_flush
    assert StoreConfig(flush_disk_type="SYNC_FLUSH").is_sync_flush


@pytest.mark.parametrize("name,key", [
    ("mapped_file_size_commit_log", "mappedFileSizeCommitLog"),
    ("destroy_mapped_file_interval_forcibly", "destroyMapedFileIntervalForcibly"),
    ("store_path_commit_log", "storePathCommitLog"),
    ("store_path_root_dir", "storePathRootDir"),
    ("broker_ip1", "brokerIP1"),
    ("disk_max_used_space_ratio", "diskMaxUsedSpaceRatio"),
    ("check_crc_on_recover", "checkCRCOnRecover"),
    ("force_verify_prop_crc", "forceVerifyPropCRC"),
    ("enabled_append_prop_crc", "enabledAppendPropCRC"),
    ("write_without_mmap", "writeWithoutMmap"),
    ("default_query_max_num", "defaultQueryMaxNum"),
    ("timer_max_delay_sec", "timerMaxDelaySec"),
    ("reput_batch_max_bytes", "reputBatchMaxBytes"),
    ("message_delay_level", "messageDelayLevel"),
    ("disk_pressure_policy", "diskPressurePolicy"),
])
def test_rocketmq_keys(name: str, key: str) -> None:
    assert key_for(name) == key
    assert FIELD_BY_KEY[key] == name
    assert key in StoreConfig().to_properties()


def test_keys_are_unique_and_cover_every_field() -> None:
    names = [f.name for f in dataclasses.fields(StoreConfig)]
    assert sorted(FIELD_BY_KEY.values()) == sorted(names)
    assert "destroyMappedFileIntervalForcibly" not in FIELD_BY_KEY  # RocketMQ's typo is the key
    assert "brokerIp1" not in FIELD_BY_KEY
    with pytest.raises(ConfigError):
        key_for("no_such_setting")


# ---- round trips ----

def test_round_trip_defaults() -> None:
    cfg = StoreConfig()
    props = cfg.to_properties()
    assert all(isinstance(v, str) for v in props.values())
    assert props["flushCommitLogTimed"] == "false"
    assert props["messageIndexEnable"] == "true"
    again, unknown = StoreConfig.from_properties(props)
    assert again == cfg and unknown == []


def test_round_trip_customised(tmp_path) -> None:
    cfg = StoreConfig(
        store_path_root_dir=str(tmp_path), store_path_commit_log=str(tmp_path / "cl"),
        mapped_file_size_commit_log=4096, flush_disk_type="SYNC_FLUSH", broker_role="SLAVE",
        delete_when="01;13", message_delay_level="1s 2d", write_without_mmap=True,
        broker_ip1="10.0.0.7", listen_port=0)
    again, unknown = StoreConfig.from_properties(cfg.to_properties())
    assert again == cfg and unknown == []
    # ... and through the text format and a file.
    text = "\n".join(f"{k}={v}" for k, v in cfg.to_properties().items())
    path = tmp_path / "broker.conf"
    path.write_text(text, encoding="utf-8")
    loaded, unknown = load_config_file(path)
    assert loaded == cfg and unknown == []


@given(
    size=st.integers(min_value=4096, max_value=2**40),
    cq=st.integers(min_value=1, max_value=2**31),
    ratio=st.integers(min_value=-5, max_value=200),
    sync=st.booleans(),
)
def test_round_trip_property(size: int, cq: int, ratio: int, sync: bool) -> None:
    cfg = StoreConfig(
        store_path_root_dir="/data/store", mapped_file_size_commit_log=size,
        mapped_file_size_consume_queue=cq, disk_max_used_space_ratio=ratio,
        flush_commit_log_timed=sync)
    assert StoreConfig.from_properties(cfg.to_properties())[0] == cfg
    # Rounding up to whole consume queue entries: the smallest multiple of 20 >= cq.
    assert cfg.mapped_file_size_consume_queue % 20 == 0
    assert cq <= cfg.mapped_file_size_consume_queue < cq + 20
    assert 10 <= cfg.disk_max_used_space_ratio <= 95


# ---- clamping, rounding, conversions ----

@pytest.mark.parametrize("value,expected", [(1001, 1020), (1020, 1020), (1, 20), (21, 40)])
def test_consume_queue_size_rounded_up(value: int, expected: int) -> None:
    cfg, _ = StoreConfig.from_properties({"mappedFileSizeConsumeQueue": str(value)})
    assert cfg.mapped_file_size_consume_queue == expected
    assert StoreConfig().with_changes(
        mapped_file_size_consume_queue=value).mapped_file_size_consume_queue == expected


@pytest.mark.parametrize("name,value,expected", [
    ("disk_max_used_space_ratio", 5, 10), ("disk_max_used_space_ratio", 99, 95),
    ("disk_max_used_space_ratio", 50, 50), ("disk_max_used_space_ratio", -1, 10),
    ("disk_space_warning_level_ratio", 20, 35), ("disk_space_warning_level_ratio", 99, 90),
    ("disk_space_warning_level_ratio", 60, 60),
    ("disk_space_clean_forcibly_ratio", 10, 30), ("disk_space_clean_forcibly_ratio", 99, 85),
    ("disk_space_clean_forcibly_ratio", 70, 70),
])
def test_ratios_clamped(name: str, value: int, expected: int) -> None:
    cfg = StoreConfig(**{name: value})
    assert getattr(cfg, name) == expected
    # The clamped value is what gets written back out.
    assert cfg.to_properties()[key_for(name)] == str(expected)


def test_value_conversions() -> None:
    cfg, unknown = StoreConfig.from_properties({
        "maxMessageSize": " +1024 ", "flushCommitLogTimed": "TRUE",
        "messageIndexEnable": "False", "brokerIP1": " 192.168.0.1 ", "listenPort": "30911",
    })
    assert unknown == []
    assert cfg.max_message_size == 1024
    assert cfg.flush_commit_log_timed is True
    assert cfg.message_index_enable is False
    assert cfg.store_host == "192.168.0.1:30911"


def test_path_fields_accept_pathlike(tmp_path: pathlib.Path) -> None:
    cfg = StoreConfig(store_path_root_dir=tmp_path)
    assert cfg.store_path_root_dir == str(tmp_path)
    assert cfg.commit_log_dir == str(tmp_path / "commitlog")
    custom = cfg.with_changes(store_path_commit_log=tmp_path / "elsewhere")
    assert custom.commit_log_dir == str(tmp_path / "elsewhere")


def test_delete_when_and_delay_levels() -> None:
    cfg = StoreConfig(delete_when="04;16; 23", message_delay_level="2s 3m 1h 1d")
    assert cfg.delete_hours() == frozenset({4, 16, 23})
    assert cfg.delay_levels_ms() == (2000, 180_000, 3_600_000, 86_400_000)
    assert StoreConfig(delete_when="4").delete_hours() == frozenset({4})


# ---- unknown keys ----

def test_unknown_keys_reported_not_dropped() -> None:
    props = {"brokerName": "b", "maxMessageSize": "100", "namesrvAddr": "x:9876",
             "mappedFileSizeCommitlog": "4096"}  # a case typo is unknown too
    cfg, unknown = StoreConfig.from_properties(props)
    assert cfg.max_message_size == 100
    assert cfg.mapped_file_size_commit_log == 1024 * 1024 * 1024
    assert unknown == ["brokerName", "namesrvAddr", "mappedFileSizeCommitlog"]
    _, unknown = StoreConfig.from_properties(
        props, extra_known_keys=frozenset({"brokerName", "namesrvAddr"}))
    assert unknown == ["mappedFileSizeCommitlog"]


def test_load_config_file_reports_unknown(tmp_path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(
        "# broker.conf\nbrokerClusterName = DefaultCluster\nbrokerRole=SYNC_MASTER\n"
        "flushDiskType:SYNC_FLUSH\ndeleteWhen 04;16\n", encoding="utf-8")
    cfg, unknown = load_config_file(str(path))
    assert (cfg.broker_role, cfg.flush_disk_type) == ("SYNC_MASTER", "SYNC_FLUSH")
    assert cfg.delete_hours() == frozenset({4, 16})
    assert unknown == ["brokerClusterName"]
    assert load_config_file(path, frozenset({"brokerClusterName"}))[1] == []


def test_load_missing_file_is_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="missing.conf"):
        load_config_file(tmp_path / "missing.conf")


# ---- bad values ----

@pytest.mark.parametrize("key,value", [
    ("mappedFileSizeCommitLog", "-1"),
    ("mappedFileSizeCommitLog", "4095"),
    ("mappedFileSizeConsumeQueue", "0"),
    ("maxMessageSize", "-5"),
    ("maxMessageSize", "abc"),
    ("maxMessageSize", "1_000"),
    ("maxMessageSize", "5.0"),
    ("maxMessageSize", ""),
    ("maxPropertiesSize", "40000"),
    ("flushIntervalCommitLog", "-1"),
    ("destroyMapedFileIntervalForcibly", "-1"),
    ("flushDiskType", "FOO"),
    ("flushDiskType", "sync_flush"),
    ("brokerRole", "MASTER"),
    ("deleteWhen", "25"),
    ("deleteWhen", "24"),
    ("deleteWhen", "04;"),
    ("deleteWhen", "ab"),
    ("deleteWhen", ""),
    ("messageDelayLevel", "1s 3x"),
    ("messageDelayLevel", "0s"),
    ("messageDelayLevel", "1.5s"),
    ("messageDelayLevel", "s"),
    ("messageDelayLevel", "   "),
    ("messageIndexEnable", "yes"),
    ("writeWithoutMmap", "1"),
    ("listenPort", "65536"),
    ("accessMessageInMemoryMaxRatio", "101"),
    ("storePathRootDir", ""),
    ("brokerIP1", " "),
    ("timerMaxDelaySec", "0"),
    ("reputBatchMaxBytes", "0"),
])
def test_bad_value_names_key_and_value(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        StoreConfig.from_properties({key: value})
    message = str(info.value)
    assert key in message
    assert f"{key}=" in message and value.strip() in message
    assert isinstance(info.value, ValueError)  # a bad value: common.config_values.ConfigError


@pytest.mark.parametrize("name,value", [
    ("mapped_file_size_commit_log", True),   # bool is an int subclass; still wrong
    ("mapped_file_size_commit_log", 4096.0),
    ("flush_disk_type", 1),
    ("message_index_enable", 1),
    ("broker_ip1", None),
])
def test_wrong_python_types_rejected(name: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key_for(name)):
        StoreConfig(**{name: value})


def test_commit_log_minimum_size_accepted() -> None:
    assert StoreConfig(mapped_file_size_commit_log=4096).mapped_file_size_commit_log == 4096


# ---- immutability and with_changes ----

def test_frozen() -> None:
    cfg = StoreConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_message_size = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        StoreConfig(4096)  # type: ignore[misc]  # keyword-only: no positional mix-ups


def test_with_changes_revalidates() -> None:
    cfg = StoreConfig()
    changed = cfg.with_changes(flush_disk_type="SYNC_FLUSH", disk_max_used_space_ratio=99)
    assert changed.is_sync_flush and changed.disk_max_used_space_ratio == 95
    assert cfg.flush_disk_type == "ASYNC_FLUSH"  # the original is untouched
    with pytest.raises(ConfigError, match="flushDiskType"):
        cfg.with_changes(flush_disk_type="FOO")
    with pytest.raises(ConfigError, match="no_such"):
        cfg.with_changes(no_such=1)


# ---- java.util.Properties syntax ----

def test_parse_properties_comments_and_separators() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "   # indented comment\n"
        "\n"
        "a=1\n"
        "b : 2\n"
        "c 3\n"
        "  d\t=\t4  \n"
        "e=\n"
        "f\n"
        "g=x=y\n"
        "h = : v\n"
        "url=http://host:80/p#frag\n"
    )
    assert parse_properties(text) == {
        "a": "1", "b": "2", "c": "3", "d": "4", "e": "", "f": "", "g": "x=y", "h": ": v",
        "url": "http://host:80/p#frag",
    }


def test_parse_properties_continuation_lines() -> None:
    text = (
        "messageDelayLevel=1s 5s \\\n"
        "    10s 30s\\\n"
        "# not a comment here\n"
        "after=1\n"
        "endsWithEscapedBackslash=C:\\\\\n"
        "next=2\n"
        "last=tail\\"
    )
    assert parse_properties(text) == {
        "messageDelayLevel": "1s 5s 10s 30s# not a comment here",
        "after": "1",
        "endsWithEscapedBackslash": "C:\\",
        "next": "2",
        "last": "tail",
    }


def test_parse_properties_escapes_and_line_endings() -> None:
    text = "a\\ b=1\r\nc\\=d=2\rk\\:x:3\nu=\\u0041\\u00e9\\t!\nsame=1\nsame=2\n"
    assert parse_properties(text) == {
        "a b": "1", "c=d": "2", "k:x": "3", "u": "A\u00e9\t!", "same": "2"}
    with pytest.raises(ConfigError):
        parse_properties("bad=\\u12G4")


def test_comment_line_does_not_continue() -> None:
    assert parse_properties("# comment \\\nkey=v\n") == {"key": "v"}


def test_parsed_broker_conf_builds_config() -> None:
    text = (
        "brokerIP1 = 10.1.2.3\n"
        "listenPort = 20911\n"
        "storePathRootDir=/data/rmq\n"
        "mappedFileSizeConsumeQueue=1001\n"
        "diskMaxUsedSpaceRatio=99\n"
        "destroyMapedFileIntervalForcibly=1000\n"
    )
    cfg, unknown = StoreConfig.from_properties(parse_properties(text))
    assert unknown == []
    assert cfg.store_host == "10.1.2.3:20911"
    assert cfg.commit_log_dir == os.path.join("/data/rmq", "commitlog")
    assert cfg.mapped_file_size_consume_queue == 1020
    assert cfg.disk_max_used_space_ratio == 95
    assert cfg.destroy_mapped_file_interval_forcibly == 1000

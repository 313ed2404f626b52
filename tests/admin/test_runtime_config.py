"""Admin GetConfig / UpdateConfig on a real in-process node: effective values under RocketMQ's
names (secrets hidden, the live role), allow-listed keys take effect in the running services at
once, and store paths, role keys, start-only keys, unknown keys and bad values are refused with
nothing changed."""
from __future__ import annotations

import grpc
import pytest

from cluster.admin.runtime_config import RUNTIME_KEYS
from cluster.v2.v2_status import V2Error
from proto import admin_pb2 as pb
from store.config import FIELD_BY_KEY

from tests.support.admin import code_of
from tests.support.nodes import TOKEN


@pytest.fixture(scope="module")
def node(module_nodes):
    return module_nodes.start()


@pytest.fixture(scope="module")
def c(module_nodes, node):
    return module_nodes.admin(node)


def values(c, *keys) -> dict[str, str]:
    return {e.key: e.value for e in c.get_config(keys).entries}


def test_get_config_shows_effective_values(node, c):
    entries = {e.key: e for e in c.get_config().entries}
    assert entries["storePathRootDir"].value == node.config.store.store_path_root_dir
    assert entries["brokerRole"].value == "ASYNC_MASTER" and entries["brokerName"].value == "broker-a"
    assert entries["adminToken"].value == "<set>" and TOKEN not in str(list(entries.values()))
    assert entries["fileReservedTime"].runtime_updatable
    assert not entries["storePathRootDir"].runtime_updatable
    assert {k for k, e in entries.items() if e.runtime_updatable} == set(RUNTIME_KEYS)
    assert set(FIELD_BY_KEY) <= set(entries)  # every store key is listed
    assert values(c, "deleteWhen") == {"deleteWhen": "04"}
    with pytest.raises(grpc.RpcError) as e:
        c.get_config(["noSuchKey"])
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "noSuchKey" in e.value.details()


def test_max_message_size_takes_effect_for_every_put_path(node, c):
    r = c.update_config("maxMessageSize", "1000")
    assert (r.key, r.value) == ("maxMessageSize", "1000") and "in memory only" in r.note
    assert node.store.config.max_message_size == 1000 == node.config.store.max_message_size
    assert node.messaging.limits().max_body == 1000  # MessagingService SendMessage
    code, details = code_of(lambda: c.send([pb.Message(topic="Sized", body=b"x" * 1001)]))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "maxMessageSize 1000" in details
    assert c.send([pb.Message(topic="Sized", body=b"x" * 1000)]).status == "PUT_OK"
    c.update_config("maxMessageSize", r.old_value)
    assert c.send([pb.Message(topic="Sized", body=b"x" * 1001)]).status == "PUT_OK"


def test_retention_and_master_keys_reach_their_services(node, c):
    retention = node.store.retention
    c.update_config("diskMaxUsedSpaceRatio", "99")  # clamped like RocketMQ's getter
    assert values(c, "diskMaxUsedSpaceRatio")["diskMaxUsedSpaceRatio"] == "95"
    c.update_config("deleteWhen", "01;13")
    assert retention.config is node.store.config is node.config.store
    assert retention.config.delete_hours() == frozenset({1, 13})
    c.update_config("slaveTimeout", "4321")
    assert node.role.master.config.slave_timeout == 4321


def test_duplicate_window_keys_reach_the_window(node, c):
    c.update_config("duplicateWindowMaxEntries", "10")
    c.update_config("duplicateWindowSeconds", "30")
    assert node.store.duplicate_window_stats().window_ms == 30_000
    assert node.store.duplicates.limits() == (30_000, 10)
    c.update_config("duplicateWindowSeconds", "0")
    assert not node.store.duplicates.enabled
    with pytest.raises(grpc.RpcError) as e:
        c.update_config("duplicateWindowSeconds", "-1")
    assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    c.update_config("duplicateWindowSeconds", "120")
    c.update_config("duplicateWindowMaxEntries", "500000")


def test_topic_auto_create_keys(node, c):
    c.update_config("autoCreateTopicEnable", "false")
    with pytest.raises(V2Error):
        node.messaging.topics.get_or_create("NotAutoCreated")
    c.update_config("defaultTopicQueueNums", "7")
    assert c.create_topic("SevenQueues").read_queue_nums == 7
    c.update_config("autoCreateTopicEnable", "true")
    assert node.messaging.topics.get_or_create("AutoCreated").write_queue_nums == 7


@pytest.mark.parametrize("key, value, code, text", [
    ("storePathRootDir", "/elsewhere", grpc.StatusCode.PERMISSION_DENIED, "immutable at runtime"),
    ("storePathCommitLog", "/elsewhere", grpc.StatusCode.PERMISSION_DENIED, "immutable at runtime"),
    ("brokerRole", "SLAVE", grpc.StatusCode.PERMISSION_DENIED, "SwitchRole"),
    ("haMasterAddress", "1.2.3.4:5", grpc.StatusCode.PERMISSION_DENIED, "immutable at runtime"),
    ("flushIntervalCommitLog", "10", grpc.StatusCode.PERMISSION_DENIED, "read once at start"),
    ("adminToken", "mine", grpc.StatusCode.PERMISSION_DENIED, "read once at start"),
    ("noSuchKey", "1", grpc.StatusCode.NOT_FOUND, "unknown config key"),
    ("", "1", grpc.StatusCode.INVALID_ARGUMENT, "empty"),
    ("fileReservedTime", "soon", grpc.StatusCode.INVALID_ARGUMENT, "integer"),
    ("fileReservedTime", "-1", grpc.StatusCode.INVALID_ARGUMENT, "fileReservedTime"),
    ("deleteWhen", "25", grpc.StatusCode.INVALID_ARGUMENT, "hour"),
    ("cleanFileForciblyEnable", "yes", grpc.StatusCode.INVALID_ARGUMENT, "true or false"),
    ("defaultTopicQueueNums", "5000", grpc.StatusCode.INVALID_ARGUMENT, "1..1024"),
])
def test_refused_updates_change_nothing(node, c, key, value, code, text):
    before_node, before_store = node.config, node.store.config
    before = {e.key: e.value for e in c.get_config().entries}
    with pytest.raises(grpc.RpcError) as e:
        c.update_config(key, value)
    assert e.value.code() == code and text in e.value.details(), e.value.details()
    assert node.config is before_node and node.store.config is before_store
    assert {e.key: e.value for e in c.get_config().entries} == before

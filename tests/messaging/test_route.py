"""Routes without a server: the topic registry (auto-create into the replicated topic table, its
problems as v2 codes), the queues and endpoints of a route."""
from __future__ import annotations

import json
import os

import pytest

from cluster.messaging.route import (ACCEPTED_MESSAGE_TYPES, config_from_route, endpoints,
                                     interleaved, message_queues)
from proto.apache.rocketmq.v2 import definition_pb2 as d
from store.json_config import PERM_READ, TopicConfig
from store.layout import CONFIG_DIR, TOPICS_FILE

from cluster.v2.v2_status import V2Error
from cluster.metadata.topic_state import TOPIC_TABLE_TOPIC
from cluster.config.node_role import Transitioning
from tests.support.v2 import topic_registry


def test_auto_create_records_the_topic_in_the_replicated_table(leader):
    r = topic_registry(leader, queues=4)
    config = r.get_or_create("Orders")
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (4, 4, 6)
    assert r.get_or_create("Orders") == config and r.get("Orders") == config
    leader.dispatched()
    [record] = leader.store.get_messages(TOPIC_TABLE_TOPIC, 0, 0, 10).messages
    assert json.loads(record.body)["by"] == "auto"
    assert topic_registry(leader).get("Orders") == config  # a replay (restart) still knows it
    r.table.replicated.persist_views()
    with open(os.path.join(leader.store.root, CONFIG_DIR, TOPICS_FILE)) as f:
        saved = json.load(f)
    assert saved["topicConfigTable"]["Orders"]["writeQueueNums"] == 4


def test_unknown_topic_without_auto_create(leader):
    r = topic_registry(leader, auto_create=False)
    with pytest.raises(V2Error) as e:
        r.get_or_create("Orders")
    assert e.value.code == d.TOPIC_NOT_FOUND
    assert leader.store.max_offset_in_queue(TOPIC_TABLE_TOPIC, 0) == 0


def test_table_problems_are_v2_errors(leader):
    r = topic_registry(leader)
    leader.master.stop("test")  # appends are refused: SERVICE_NOT_AVAILABLE
    with pytest.raises(V2Error) as e:
        r.ensure("%DLQ%G", 1)
    assert e.value.code == d.INTERNAL_SERVER_ERROR  # PutStatus SERVICE_NOT_AVAILABLE's code
    leader.role.set(Transitioning("switching"))
    with pytest.raises(V2Error) as e:
        r.get_or_create("Orders")  # a node between roles: reads its follower copy (empty)
    assert e.value.code == d.INTERNAL_SERVER_ERROR and "changing role" in e.value.message


def test_message_queues_of_a_route():
    config = TopicConfig(topic_name="T", read_queue_nums=4, write_queue_nums=2)
    eps = endpoints(["127.0.0.1:10921", "127.0.0.1:10911", "127.0.0.1:10921"])
    assert eps.scheme == d.IPv4
    assert [(a.host, a.port) for a in eps.addresses] == [("127.0.0.1", 10921), ("127.0.0.1", 10911)]
    queues = message_queues(d.Resource(name="T"), config, "broker-a", eps)
    assert [q.id for q in queues] == [0, 1, 2, 3]
    assert [q.permission for q in queues] == [d.READ_WRITE, d.READ_WRITE, d.READ, d.READ]
    for q in queues:
        assert (q.broker.name, q.broker.id) == ("broker-a", 0)
        assert q.broker.endpoints == eps and q.topic.name == "T"
        assert tuple(q.accept_message_types) == ACCEPTED_MESSAGE_TYPES
    assert config_from_route("T", queues, "broker-a") == config
    assert config_from_route("T", queues, "broker-b") is None
    read_only = TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2, perm=PERM_READ)
    again = message_queues(d.Resource(name="T"), read_only, "b", eps)
    assert {q.permission for q in again} == {d.READ}
    assert config_from_route("T", again, "b") == read_only


def test_a_group_without_master_is_routed_read_only_and_groups_take_turns():
    eps = endpoints(["127.0.0.1:1"])
    config = TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2)
    assert {q.permission for q in message_queues(d.Resource(name="T"), config, "a", eps,
                                                  writable=False)} == {d.READ}
    write_only = TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2, perm=2)
    assert {q.permission for q in message_queues(d.Resource(name="T"), write_only, "a", eps,
                                                  writable=False)} == {d.NONE}
    a = message_queues(d.Resource(name="T"), config, "a", eps)
    b = message_queues(d.Resource(name="T"), TopicConfig(topic_name="T", read_queue_nums=3,
                                                         write_queue_nums=3), "b", eps)
    assert [(q.broker.name, q.id) for q in interleaved([a, b])] == [
        ("a", 0), ("b", 0), ("a", 1), ("b", 1), ("b", 2)]
    assert interleaved([]) == []

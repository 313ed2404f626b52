"""Routes without a server: the topic registry (auto-create, persisted in config/topics.json),
the queues and endpoints of a route."""
from __future__ import annotations

import json

import pytest

from cluster.messaging.route import (ACCEPTED_MESSAGE_TYPES, config_from_route, endpoints,
                                     message_queues)
from proto.apache.rocketmq.v2 import definition_pb2 as d
from store.json_config import PERM_READ, TopicConfig
from store.layout import CONFIG_DIR, TOPICS_FILE

from tests.support.v2 import topic_registry


def test_auto_create_persists_the_topic(tmp_path):
    r = topic_registry(tmp_path, queues=4)
    config = r.get_or_create("Orders")
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (4, 4, 6)
    saved = json.loads((tmp_path / CONFIG_DIR / TOPICS_FILE).read_text())
    assert saved["topicConfigTable"]["Orders"]["writeQueueNums"] == 4
    assert topic_registry(tmp_path).get("Orders") == config  # a restart still knows it


def test_unknown_topic_without_auto_create(tmp_path):
    r = topic_registry(tmp_path, auto_create=False)
    from cluster.messaging.v2_status import V2Error
    with pytest.raises(V2Error) as e:
        r.get_or_create("Orders")
    assert e.value.code == d.TOPIC_NOT_FOUND
    assert not (tmp_path / CONFIG_DIR / TOPICS_FILE).exists()


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
    assert config_from_route("T", queues) == config
    read_only = TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2, perm=PERM_READ)
    again = message_queues(d.Resource(name="T"), read_only, "b", eps)
    assert {q.permission for q in again} == {d.READ}
    assert config_from_route("T", again) == read_only

"""Client limits: broker.conf keys (RocketMQ 5 proxy names), their validation, and that a node
enforces what its config says, naming the key in the refusal."""
from __future__ import annotations

import pytest

from cluster.config.client_limits import CLIENT_LIMIT_KEYS, MIB, ClientLimits, server_options
from cluster.config.node_config import NODE_KEYS, node_config_from_properties
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from common.config_values import ConfigError

from tests.support.v2 import msg


def test_keys_parse_with_proxy_defaults():
    assert CLIENT_LIMIT_KEYS <= NODE_KEYS
    default = node_config_from_properties({}).limits
    assert default == ClientLimits()
    assert (default.max_user_property_size, default.user_property_max_num,
            default.max_message_group_size, default.max_invisible_time_ms) == \
        (16 * 1024, 128, 64, 12 * 3600_000)
    limits = node_config_from_properties({"userPropertyMaxNum": "3",
                                          "maxBatchMessageCount": "10",
                                          "grpcMaxInboundMessageSize": "2097152"}).limits
    assert (limits.user_property_max_num, limits.max_batch_message_count) == (3, 10)
    assert server_options(limits, 4 * MIB)[0] == ("grpc.max_receive_message_length", 2 * MIB)
    assert default.inbound_message_size(4 * MIB) == 9 * MIB  # derived from maxMessageSize


@pytest.mark.parametrize("key,value", [
    ("userPropertyMaxNum", "0"), ("maxUserPropertySize", "-1"), ("maxBatchMessageCount", "x"),
    ("maxInvisibleTimeMills", "10"), ("grpcMaxInboundMessageSize", str(2 ** 40)),
    ("maxInvisibleTimeMills", "5000"),  # below minInvisibleTimeMillsForRecv (10000)
])
def test_out_of_range_values_are_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=key):
        node_config_from_properties({key: value})


def test_a_node_enforces_its_configured_limits(nodes):
    node = nodes.start(limits=ClientLimits(user_property_max_num=2, max_batch_message_count=2,
                                           max_message_group_size=8))
    stub = nodes.stub(node)
    end = node.store.max_phy_offset()
    cases = [
        ([msg("L", user={"a": "1", "b": "2", "c": "3"})], d.MESSAGE_PROPERTIES_TOO_LARGE,
         "userPropertyMaxNum 2"),
        ([msg("L"), msg("L"), msg("L")], d.PAYLOAD_TOO_LARGE, "maxBatchMessageCount 2"),
        ([msg("L", message_group="g" * 8)], d.ILLEGAL_MESSAGE_GROUP, "maxMessageGroupSize 8"),
    ]
    for messages, code, text in cases:
        r = stub.SendMessage(s.SendMessageRequest(messages=messages), timeout=5)
        assert (r.status.code, text in r.status.message) == (code, True), r.status
    assert node.store.max_phy_offset() == end
    ok = stub.SendMessage(s.SendMessageRequest(messages=[msg("L", user={"a": "1"})]), timeout=5)
    assert ok.status.code == d.OK

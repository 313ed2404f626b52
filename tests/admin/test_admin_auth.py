"""Every Admin call added for operators is refused with UNAUTHENTICATED without the bearer
token or with a wrong one, and a refused call changes nothing."""
from __future__ import annotations

import grpc
import pytest

from proto import admin_pb2 as pb
from proto import admin_pb2_grpc as pb_grpc

from tests.support.nodes import TOKEN

CALLS = [
    ("ListTopics", pb.ListTopicsRequest()),
    ("CreateTopic", pb.TopicRequest(name="AuthTopic")),
    ("UpdateTopic", pb.TopicRequest(name="Existing", perm=4)),
    ("DeleteTopic", pb.DeleteTopicRequest(name="Existing")),
    ("ListGroups", pb.ListGroupsRequest()),
    ("UpsertGroup", pb.UpsertGroupRequest(name="AuthGroup")),
    ("DeleteGroup", pb.DeleteGroupRequest(name="AuthGroup")),
    ("GetConsumerProgress", pb.ConsumerProgressRequest(group="AuthGroup")),
    ("ResetOffset", pb.ResetOffsetRequest(group="AuthGroup", topic="Existing", offset=0)),
    ("QueryMessages", pb.QueryMessagesRequest(topic="Existing", key="k")),
    ("Flush", pb.FlushRequest()),
    ("TriggerCleanup", pb.CleanupRequest(wait_ms=100)),
    ("GetStoreStats", pb.StoreStatsRequest()),
    ("GetConfig", pb.GetConfigRequest()),
    ("UpdateConfig", pb.UpdateConfigRequest(key="fileReservedTime", value="0")),
]


@pytest.fixture(scope="module")
def node(module_nodes):
    n = module_nodes.start()
    module_nodes.admin(n).create_topic("Existing")
    return n


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer wrong-token"),),
                                      (("authorization", TOKEN),)],
                         ids=["missing", "wrong", "not-bearer"])
def test_new_calls_need_the_token(module_nodes, node, metadata):
    table_version = node.messaging.topics.table.data_version
    config = node.config
    with grpc.insecure_channel(node.address) as channel:
        stub = pb_grpc.AdminStub(channel)
        for method, request in CALLS:
            with pytest.raises(grpc.RpcError) as e:
                getattr(stub, method)(request, metadata=metadata, timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, method
            assert "token" in e.value.details() or "authorization" in e.value.details()
    assert node.messaging.topics.table.data_version == table_version
    assert node.messaging.topics.get("AuthTopic") is None
    assert node.messaging.topics.get("Existing").perm == 6
    assert node.config is config
    assert "AuthGroup" not in {g.name for g in module_nodes.admin(node).list_groups().groups}

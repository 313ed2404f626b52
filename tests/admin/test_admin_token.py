"""The admin token: generated once with mode 0600, reused, checked on every Admin call (by the
interceptor on a bare server, and on a real node: every operator call is refused with
UNAUTHENTICATED without the bearer token or with a wrong one, and a refused call changes
nothing)."""
import os
import stat
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from cluster.admin.admin_token import (BearerTokenInterceptor, ensure_token_file, read_token_file,
                                       resolve_token)
from proto import admin_pb2 as pb
from proto import admin_pb2_grpc as pb_grpc
from common.config_values import ConfigError
from store.layout import ADMIN_TOKEN_FILE, CONFIG_DIR
from tests.support.nodes import TOKEN


def test_generated_token_is_private_and_reused(tmp_path):
    path = str(tmp_path / CONFIG_DIR / ADMIN_TOKEN_FILE)
    token, generated = ensure_token_file(path)
    assert generated and len(token) >= 40
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again, generated_again = ensure_token_file(path)
    assert (again, generated_again) == (token, False)


def test_token_sources_in_order(tmp_path):
    f = tmp_path / "t"
    f.write_text("from-file\n")
    assert resolve_token("inline", "", str(tmp_path / "x"))[0] == "inline"
    assert resolve_token("", str(f), str(tmp_path / "x")) == ("from-file", str(f))
    token, where = resolve_token("", "", str(tmp_path / "gen"))
    assert where == str(tmp_path / "gen") and read_token_file(where) == token


def test_empty_or_missing_token_file_is_an_error(tmp_path):
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        read_token_file(str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="cannot read"):
        read_token_file(str(tmp_path / "missing"))


class _Admin(pb_grpc.AdminServicer):
    def GetNodeStatus(self, request, context):
        return pb.NodeStatus(node_id="n:0")


@pytest.fixture
def server():
    srv = grpc.server(futures.ThreadPoolExecutor(4), interceptors=[BearerTokenInterceptor("s3cret")])
    pb_grpc.add_AdminServicer_to_server(_Admin(), srv)
    hs = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(hs, srv)
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield channel
    channel.close()
    srv.stop(0)


@pytest.mark.parametrize("metadata, detail", [
    ((), "missing authorization"),
    ((("authorization", "Bearer wrong"),), "wrong admin token"),
    ((("authorization", "s3cret"),), "wrong admin token"),
])
def test_admin_calls_without_the_right_token_are_unauthenticated(server, metadata, detail):
    stub = pb_grpc.AdminStub(server)
    with pytest.raises(grpc.RpcError) as e:
        stub.GetNodeStatus(pb.NodeStatusRequest(), metadata=metadata, timeout=5)
    assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert detail in e.value.details()


def test_right_token_passes_and_health_needs_none(server):
    stub = pb_grpc.AdminStub(server)
    st = stub.GetNodeStatus(pb.NodeStatusRequest(), metadata=(("authorization", "Bearer s3cret"),), timeout=5)
    assert st.node_id == "n:0"
    reply = health_pb2_grpc.HealthStub(server).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


# -- on a real node -------------------------------------------------------------------------------
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

"""The client's Connection: its configuration (endpoints, gRPC target, client id, checks),
namespaces and routes, signed calls, several endpoints and the heartbeat, and a transport error
when no server answers."""
from __future__ import annotations

import re

import grpc
import pytest

from cluster.client import ClientConfig, ClientError, Message, Producer, TransportError
from proto.apache.rocketmq.v2 import definition_pb2 as d
from tests.support.waiting import free_port


def test_client_config():
    c = ClientConfig("127.0.0.2:81;127.0.0.1:80")
    assert c.addresses == ("127.0.0.2:81", "127.0.0.1:80")
    assert c.target == "ipv4:127.0.0.1:80,127.0.0.2:81"
    assert ClientConfig("localhost:80").target == "localhost:80"
    assert re.match(r"^.+@\d+@\d+@[0-9a-z]+$", c.client_id)
    for bad in ("", "host", "host:0", "a:1;b:2", "h:99999"):
        with pytest.raises(ValueError):
            ClientConfig(bad)
    with pytest.raises(ValueError):
        ClientConfig("127.0.0.1:80", request_timeout=0)
    with pytest.raises(ValueError):
        ClientConfig("127.0.0.1:80", secret_key="s")


def test_namespace_and_route_errors(nodes):
    node = nodes.start(auto_create_topic_enable=False)
    conn = nodes.connect(node, namespace="ns1")
    with pytest.raises(ClientError) as e:
        conn.route("T")
    assert e.value.code == d.NOT_IMPLEMENTED
    plain = nodes.connect(node)
    with pytest.raises(ClientError) as e:
        Producer(plain, ["Missing"])
    assert e.value.code == d.TOPIC_NOT_FOUND


def test_signed_calls(nodes):
    node = nodes.start(access_key="ak", secret_key="sk")
    Producer(nodes.connect(node, access_key="ak", secret_key="sk")).send(Message("T", b"x"))
    before = node.store.max_phy_offset()
    for config in ({"access_key": "ak", "secret_key": "wrong"}, {}):
        with pytest.raises(ClientError) as e:
            Producer(nodes.connect(node, **config)).send(Message("T", b"y"))
        assert e.value.code == d.UNAUTHORIZED
    assert node.store.max_phy_offset() == before


def test_no_server_is_a_transport_error(nodes):
    conn = nodes.connect(f"127.0.0.1:{free_port()}", request_timeout=2)
    with pytest.raises(TransportError) as e:
        Producer(conn).send(Message("T", b"x"))
    assert e.value.grpc_code is grpc.StatusCode.UNAVAILABLE and e.value.code == d.CODE_UNSPECIFIED


def test_several_endpoints_and_heartbeat(nodes):
    """"a;b": one gRPC target over both addresses; the dead one is skipped."""
    node = nodes.start()
    conn = nodes.connect(f"127.0.0.1:{free_port()};{node.address}")
    assert conn.config.target.startswith("ipv4:127.0.0.1:")
    conn.heartbeat()
    assert Producer(conn).send(Message("T", b"x")).offset == 0

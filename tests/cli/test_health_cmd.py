"""`python -m cluster health`: exit 0 only on SERVING (the compose healthcheck relies on it)."""
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from cluster.cli.cluster_cli import main


@pytest.fixture
def health_server():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(None)


def test_serving_exits_0_and_not_serving_exits_1(health_server, capsys):
    address, servicer = health_server
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    assert main(["health", "--address", address]) == 0
    assert "SERVING" in capsys.readouterr().out
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert main(["health", "--address", address]) == 1


def test_unknown_service_exits_1(health_server, capsys):
    address, _ = health_server
    assert main(["health", "--address", address, "--service", "no.such.Service"]) == 1
    assert "NOT_FOUND" in capsys.readouterr().err


def test_connect_only_needs_no_health_service(health_server):
    address, _ = health_server
    assert main(["health", "--address", address, "--connect-only"]) == 0


def test_nobody_listening_exits_1():
    # a port just released by a server: nothing accepts there
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    server.stop(None).wait()
    address = f"127.0.0.1:{port}"
    assert main(["health", "--address", address, "--timeout", "0.5"]) == 1
    assert main(["health", "--address", address, "--timeout", "0.5", "--connect-only"]) == 1

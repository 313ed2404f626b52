"""The controller's grpc.health.v1 service: the server is SERVING while it runs, standby or
active (a container healthcheck must not fail a standby); the Active service name is SERVING
only on the controller that holds the leadership."""
from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster.controller.controller_config import ControllerConfig, EtcdSettings
from cluster.assembly.controller_process import ACTIVE_HEALTH_SERVICE, ControllerProcess
from cluster.controller.controller_servicer import SERVICE
from tests.support.waiting import wait_until

SERVING = health_pb2.HealthCheckResponse.SERVING


def _status(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=3).status


def _controller(tmp_path, name: str, etcd=None) -> ControllerProcess:
    settings = EtcdSettings(endpoints=(etcd.url,), prefix="/health") if etcd else EtcdSettings()
    proc = ControllerProcess(ControllerConfig(listen_address="127.0.0.1:0",
                                              store_path=str(tmp_path / name), etcd=settings,
                                              cluster_secret="health-test-cluster-secret"))
    proc.start()
    return proc


def test_a_single_controller_is_serving_and_active(tmp_path):
    proc = _controller(tmp_path, "c")
    try:
        for service in ("", SERVICE, ACTIVE_HEALTH_SERVICE):
            assert _status(proc.address, service) == SERVING
    finally:
        proc.stop()


def test_with_etcd_both_serve_and_only_the_leader_is_active(tmp_path, etcd):
    a = _controller(tmp_path, "a", etcd)
    b = None
    try:
        wait_until(lambda: _status(a.address, ACTIVE_HEALTH_SERVICE) == SERVING, 10)
        b = _controller(tmp_path, "b", etcd)
        assert _status(b.address, "") == SERVING  # a standby is a healthy process
        assert _status(b.address, ACTIVE_HEALTH_SERVICE) != SERVING
        a.stop()  # resigns the lease: the standby takes over
        wait_until(lambda: _status(b.address, ACTIVE_HEALTH_SERVICE) == SERVING, 10)
    finally:
        a.stop()
        if b is not None:
            b.stop()

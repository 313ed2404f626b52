"""A controller process: its gRPC server, its service and the ticker that elects on time.
`python -m cluster controller` (cluster/cli/serve_cmd.py) runs one until a signal.

Alone (no controllerEtcdEndpoints) it is always the active controller and keeps its state in a
file. With etcd endpoints it is one of several: a LeadershipThread
(cluster/controller/leadership.py) makes it the active one while it holds the leader lease, its
state lives in etcd (cluster/controller/etcd_store.py), and as a standby it refuses every call with FAILED_PRECONDITION naming the active controller.

The server also answers grpc.health.v1 (no token): the whole server ("") and the Controller
service are SERVING from start() until stop(), standby or active alike (both are healthy
processes: a container healthcheck must not restart a standby); `ACTIVE_HEALTH_SERVICE` is
SERVING only while this controller may answer as the active one, so tools find it.
"""
from __future__ import annotations

import logging
import os
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from proto import controller_pb2_grpc, membership_pb2_grpc
from common.clock import SYSTEM_CLOCK, Clock
from store.errors import StoreError
from common.service import PeriodicTask

from cluster.admin.admin_token import BearerTokenInterceptor, ensure_token_file
from cluster.controller.controller_config import ControllerConfig
from cluster.controller.controller_service import ControllerService, FileStateStore
from cluster.controller.active_gate import NotActiveController
from cluster.controller.controller_servicer import PROTECTED_METHODS, SERVICE, ControllerServicer
from cluster.controller.etcd_client import EtcdClient
from cluster.controller.etcd_store import EtcdStateStore
from cluster.controller.leadership import Leadership, LeadershipConfig, LeadershipThread
from cluster.console import console_api as console
from cluster.console.trends import TrendSampler, controller_readings
from cluster.metrics.exposition import MetricsEndpoint
from cluster.metrics.process_collectors import ControllerCollector
from cluster.security.member_gate import MemberGate, MembershipServicer, resolve_cluster_secret
from cluster.security.tls import add_port

log = logging.getLogger(__name__)
TICK_S = 0.1
# An etcd call must end well within a keepalive interval (a third of the lease, >= 0.67 s), so
# a dead endpoint is given up in time to try the next one.
ETCD_TIMEOUT_S = 0.5
# A health service name that is SERVING only on the active controller (a standby says
# NOT_SERVING): `python -m cluster health --service rmqstore.controller.Active` finds it.
ACTIVE_HEALTH_SERVICE = "rmqstore.controller.Active"
HEALTH_NAMES = ("", SERVICE)


class ControllerProcess:
    """The controller's gRPC server, its service, the ticker that elects on time and, with
    etcd, the leadership thread. The service exists from start() on (its address must be known
    first: it goes into the leader key)."""

    def __init__(self, config: ControllerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        os.makedirs(config.store_path, exist_ok=True)
        self.token, _ = ensure_token_file(config.token_path)
        secret = resolve_cluster_secret(config.cluster_secret, config.cluster_secret_file)
        if secret is None:
            raise StoreError("the controller needs clusterSecret or clusterSecretFile: it "
                             "admits only nodes that prove membership with the cluster secret")
        self.gate = MemberGate(secret, "controller", clock)
        self.service: ControllerService | None = None
        self.leadership: Leadership | None = None
        self._threads: list[PeriodicTask] = []
        self._server: grpc.Server | None = None
        self.servicer: ControllerServicer | None = None
        self.metrics: MetricsEndpoint | None = None
        self.trends: TrendSampler | None = None  # the console's charts (cluster/console/trends.py)
        self.health = health.HealthServicer(experimental_non_blocking=True)
        self.address = ""

    def start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16,
                                                        thread_name_prefix="controller"),
                             interceptors=[BearerTokenInterceptor(self.token, PROTECTED_METHODS)])
        host = self.config.listen_address.rpartition(":")[0]
        port = add_port(server, self.config.listen_address, self.config.tls)
        if port == 0:
            raise StoreError(f"cannot listen on {self.config.listen_address}")
        self.address = f"{host}:{port}"
        self.service = self._make_service()
        self.servicer = ControllerServicer(self.service, self.address, self.gate,
                                           clock=self.clock)
        controller_pb2_grpc.add_ControllerServicer_to_server(self.servicer, server)
        membership_pb2_grpc.add_MembershipServicer_to_server(MembershipServicer(self.gate), server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for name in HEALTH_NAMES:
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.update_active_health()
        server.start()
        self._server = server
        if self.config.metrics_listen_address:
            # the console of the whole cluster is served beside the metrics
            self.metrics = MetricsEndpoint(self.config.metrics_listen_address,
                                           [ControllerCollector(self)], pages=console.pages(),
                                           api=console.ControllerApi(self).routes(),
                                           token=self.token, tls=self.config.tls)
        self._threads.append(PeriodicTask("controller-tick", self.service.tick, TICK_S))
        if self.config.metrics_listen_address:  # the console's charts: their sampler
            self.trends = TrendSampler(controller_readings(self.service, self.clock), self.clock)
            self._threads.append(self.trends)
        self._threads.append(PeriodicTask("controller-health", self.update_active_health,
                                          TICK_S * 5))
        if self.leadership is not None:
            self._threads.append(LeadershipThread(self.leadership))
        for thread in self._threads:
            thread.start()
        where = (f"etcd {','.join(self.config.etcd.endpoints)} under {self.config.etcd.prefix}"
                 if self.config.etcd.enabled else self.config.state_path)
        log.info("controller listening on %s%s (state in %s)", self.address,
                 " with TLS" if self.config.tls.enabled else "", where)

    def stop(self) -> None:
        for thread in reversed(self._threads):  # the leadership first: it resigns the lease
            thread.stop()
        for name in (*HEALTH_NAMES, ACTIVE_HEALTH_SERVICE):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.metrics is not None:
            self.metrics.close()
        if self._server is not None:
            self._server.stop(grace=1.0).wait(5)

    def update_active_health(self) -> None:
        """ACTIVE_HEALTH_SERVICE follows the gate: SERVING while this controller answers."""
        try:
            if self.leadership is not None:
                self.leadership.check_active()
            state = health_pb2.HealthCheckResponse.SERVING
        except NotActiveController:
            state = health_pb2.HealthCheckResponse.NOT_SERVING
        self.health.set(ACTIVE_HEALTH_SERVICE, state)

    def _make_service(self) -> ControllerService:
        election = self.config.election
        if not self.config.etcd.enabled:
            return ControllerService(FileStateStore(self.config.state_path), election, self.clock)
        etcd = self.config.etcd
        client = EtcdClient(etcd.endpoints, ETCD_TIMEOUT_S)
        self.leadership = Leadership(client, LeadershipConfig(
            etcd.prefix, self.config.advertised_address or self.address, etcd.lease_seconds),
            self.clock)
        store = EtcdStateStore(client, etcd.prefix, self.leadership.current_lease)
        service = ControllerService(store, election, self.clock, gate=self.leadership)
        self.leadership.on_elected = service.reload
        return service

"""An archive server process: `python -m cluster archive` (cluster/cli/serve_cmd.py) runs one
until a signal. Its gRPC server answers the Archive service (proto/archive.proto), the
membership challenge (shipping nodes prove the cluster secret) and grpc.health.v1; the HTTP
JSON endpoint serves the reads; the retention service expires files, forwards them in mixed
mode and announces the archive's time ranges in the registry.
"""
from __future__ import annotations

import logging
import os
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from proto import archive_pb2 as archive_pb
from proto import archive_pb2_grpc, membership_pb2_grpc
from proto import controller_pb2 as controller_pb
from proto import controller_pb2_grpc as controller_pb_grpc
from common.clock import SYSTEM_CLOCK, Clock
from store.errors import StoreError
from store.retention.retention import DiskUsage, default_disk_usage

from cluster.admin.admin_token import BearerTokenInterceptor, ensure_token_file
from cluster.archive.archive import Archive
from cluster.archive.archive_config import ArchiveConfig
from cluster.archive.archive_retention import ArchiveRetention
from cluster.admin.message_lookup import request_from_params
from cluster.archive.archive_servicer import PROTECTED, SERVICE, ArchiveServicer, holdings
from cluster.archive.reconsume import reconsume
from cluster.archive.upload import UploadRefused
from cluster.archive.registry import ArchiveEntry, announce
from cluster.client.connection import ClientConfig
from cluster.metrics.exposition import ApiError, MetricsEndpoint, proto_json
from cluster.metrics.process_collectors import ArchiveCollector
from cluster.security.member_gate import (
    MemberCredentials,
    MemberGate,
    MembershipServicer,
    resolve_cluster_secret,
)
from cluster.security.member_proof import ARCHIVE_ANNOUNCE, ARCHIVE_SHIP, MembershipRefused
from cluster.security.refusal_log import RefusalLog
from cluster.security.tls import add_port, open_channel

log = logging.getLogger(__name__)


class ArchiveProcess:
    """Owns the Archive, its gRPC and HTTP servers and the retention service."""

    def __init__(self, config: ArchiveConfig, clock: Clock = SYSTEM_CLOCK,
                 disk_usage: DiskUsage = default_disk_usage) -> None:
        self.config = config
        self.clock = clock
        self.archive = Archive(config.store_path, clock)
        self.archive.cluster_client = lambda address: ClientConfig(
            address, access_key=config.reconsume_access_key,
            secret_key=config.reconsume_secret_key, tls=config.tls.client())
        self.token, _ = ensure_token_file(config.token_path)
        secret = resolve_cluster_secret(config.cluster_secret, config.cluster_secret_file)
        if secret is None:
            raise StoreError("the archive needs clusterSecret or clusterSecretFile")
        ident = f"archive-{self.archive.archive_id}"
        self.gate = MemberGate(secret, ident, clock)
        self.credentials = MemberCredentials(secret, ident)
        self.retention = ArchiveRetention(self.archive, config, clock, self.credentials,
                                          disk_usage, announce=self.announce)
        self._channels: dict[str, grpc.Channel] = {}
        self._refusals = RefusalLog(log, logging.WARNING, clock)
        self.health = health.HealthServicer(experimental_non_blocking=True)
        self._server: grpc.Server | None = None
        self._http: MetricsEndpoint | None = None
        self.address = ""
        self.http_address = ""
        self.metrics: MetricsEndpoint | None = None

    def start(self) -> None:
        self.archive.load()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16,
                                                        thread_name_prefix="archive"),
                             interceptors=[BearerTokenInterceptor(self.token, PROTECTED)],
                             options=[("grpc.max_receive_message_length", 64 << 20)])
        host = self.config.listen_address.rpartition(":")[0]
        port = add_port(server, self.config.listen_address, self.config.tls)
        if port == 0:
            raise StoreError(f"cannot listen on {self.config.listen_address}")
        self.address = self.config.advertised_address or f"{host}:{port}"
        archive_pb2_grpc.add_ArchiveServicer_to_server(
            ArchiveServicer(self.archive, lambda context: self.gate.admit(context, ARCHIVE_SHIP)),
            server)
        membership_pb2_grpc.add_MembershipServicer_to_server(MembershipServicer(self.gate), server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for name in ("", SERVICE):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        server.start()
        self._server = server
        if self.config.http_listen_address:
            self._http = MetricsEndpoint(self.config.http_listen_address, [],
                                         api=self._http_reads(), post=self._http_writes(),
                                         token=self.token, tls=self.config.tls)
            self.http_address = self._http.address
        if self.config.metrics_listen_address:
            self.metrics = MetricsEndpoint(self.config.metrics_listen_address,
                                           [ArchiveCollector(self)], tls=self.config.tls)
        self.announce()
        self.archive.indexer.start()
        self.retention.start()
        log.info("archive %s listening on %s%s (HTTP %s), files in %s, forwarding to %s",
                 self.archive.archive_id, self.address,
                 " with TLS" if self.config.tls.enabled else "", self.http_address or "off",
                 self.archive.root, self.config.forward_address or "nobody")

    # -- the HTTP JSON endpoint: the gRPC reads and Reconsume, for curl and browsers --------
    #   GET  /api/holdings[?group=G]
    #   GET  /api/messages?topic=T&key=K | id=ID | begin=MS&end=MS [&group=G&queue_id=Q&max=N
    #        &omit_body=1]
    #   POST /api/reconsume {"msg_ids": [...], "cluster_address": "host:port",
    #                        "target_topic": "", "group": ""}
    def _http_reads(self) -> dict:
        archive = self.archive
        return {"/api/holdings": _refusals_as_400(
                    lambda p: proto_json(holdings(archive, p.get("group", "")))),
                "/api/messages": _refusals_as_400(
                    lambda p: proto_json(archive.query(p.get("group", ""),
                                                       request_from_params(p))))}

    def _http_writes(self) -> dict:
        def reconsume_json(body) -> dict:
            try:
                req = archive_pb.ReconsumeRequest(
                    broker_group=str(body.get("group", "")),
                    msg_ids=[str(i) for i in body["msg_ids"]],
                    target_topic=str(body.get("target_topic", "")),
                    cluster_address=str(body["cluster_address"]))
            except (KeyError, TypeError, AttributeError) as e:
                raise ApiError(400, f"bad reconsume request: {type(e).__name__}: {e}") from None
            return proto_json(reconsume(self.archive, req))
        return {"/api/reconsume": _refusals_as_400(reconsume_json)}

    def announce(self) -> None:
        """This archive's time ranges into the registry file and to the controllers (where
        there are any)."""
        if not self.address:
            return
        groups = {g.name: g.time_range() for g in self.archive.holdings()}
        entry = ArchiveEntry(self.archive.archive_id, self.address, self.http_address, groups,
                             self.clock.now_ms(), os.path.abspath(self.config.token_path))
        if self.config.registry_file:
            announce(self.config.registry_file, entry)
        for address in self.config.controller_addresses:
            self._announce_to(address, entry)

    def _announce_to(self, address: str, entry: ArchiveEntry) -> None:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = open_channel(address, self.config.tls)
        message = controller_pb.ArchiveAnnouncement(
            archive_id=entry.archive_id, address=entry.address, http_address=entry.http,
            token_file=entry.token_file,
            groups=[controller_pb.GroupRange(broker_group=g, first_store_timestamp=first,
                                             last_store_timestamp=last)
                    for g, (first, last) in sorted(entry.groups.items())])
        try:
            metadata = self.credentials.metadata(channel, ARCHIVE_ANNOUNCE, 5.0)
            controller_pb_grpc.ControllerStub(channel).AnnounceArchive(
                message, metadata=metadata, timeout=5.0)
        except (grpc.RpcError, MembershipRefused) as e:
            self._refusals.refused("AnnounceArchive", address, str(e))

    def stop(self) -> None:
        self.retention.stop()
        for name in ("", SERVICE):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.metrics is not None:
            self.metrics.close()
        if self._http is not None:
            self._http.close()
        if self._server is not None:
            self._server.stop(grace=1.0).wait(5)
        for channel in self._channels.values():
            channel.close()
        self.archive.close()


def _refusals_as_400(fn):
    """An archive refusal (a bad group name) is the caller's fault."""
    def call(arg):
        try:
            return fn(arg)
        except UploadRefused as e:
            raise ApiError(400, str(e)) from None
    return call

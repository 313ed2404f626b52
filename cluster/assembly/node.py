"""One node: the embedded store, its role (master or slave, switchable at runtime), and the
gRPC server with the Replication, Admin, RocketMQ 5 MessagingService (cluster/messaging/) and
grpc.health.v1 services on one port.

Start order: load and recover the store, read the epoch file, build the features, take the
configured role, then serve. Stop order (SIGTERM): stop serving, leave the role (sync waiters
answered, streams closed), shut the store down cleanly (flush, checkpoint, remove `abort`).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Callable

from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ha.epoch import EpochCache
from master.replication_servicer import NotAdmitted, ReplicationServicer
from master.replication_servicer import add_to_server as add_replication_to_server
from master.master_role import MasterRole
from master.write_lease import WriteLease
from proto import admin_pb2 as apb
from proto import admin_pb2_grpc
from proto import controller_pb2 as cpb
from proto import membership_pb2_grpc
from slave.replication_client import GRPC_OPTIONS, ReplicationClient
from store import running_flags
from store.broker_role import BrokerRole
from common.clock import SYSTEM_CLOCK, Clock
from store.codec import Message
from store.epoch_file import EpochFile
from store.errors import StoreError
from store.layout import StoreLayout
from store.message_store import MessageStore
from store.put_result import PutResult
from common.service import PeriodicTask
from store.volume_check import check_volumes

from cluster.admin.admin_node import AdminNode
from cluster.archive.shipper import ArchiveShipper, StoreFiles
from cluster.console import console_api as console
from cluster.metrics.call_counter import CallCounter
from cluster.metrics.exposition import MetricsEndpoint
from cluster.metrics.node_collector import NodeCollector
from cluster.admin.admin_servicer import AdminServicer
from cluster.admin.admin_token import BearerTokenInterceptor, resolve_token
from cluster.assembly.client_api import build_messaging
from cluster.messaging.messaging_service import SERVICE_NAME as MESSAGING_SERVICE, MessagingService
from cluster.messaging.messaging_servicer import (
    BatchReceiveServicer,
    MessagingServicer,
    add_to_server,
)
from cluster.messaging.v2_access import V2AccessInterceptor
from cluster.controller.election import Assignment
from .assignment_plan import plan_assignment
from .controller_link import ControllerLink
from .route_sync import RouteSync
from cluster.serving.grpc_server import AioGrpcServer
from cluster.consume.handle_mac import handle_key
from cluster.config.client_limits import server_options
from cluster.serving.request_decoding import UndecodableRequestInterceptor
from cluster.config.cluster_route import ClusterRoute
from cluster.config.live_config import LiveConfig
from cluster.config.node_config import NodeConfig
from cluster.config.node_role import Follower, Leader, Role, Transitioning
from .node_status import node_load, node_status
from cluster.security.member_gate import (
    MemberCredentials,
    MemberGate,
    MembershipServicer,
    Refusal,
    resolve_cluster_secret,
)
from cluster.security.member_proof import REPLICATION_STREAM
from cluster.security.tls import open_channel

log = logging.getLogger(__name__)
SERVICES = ("rmqstore.admin.v1.Admin", "rmqstore.replication.v1.Replication", MESSAGING_SERVICE,
            "rmqstore.messaging.v1.BatchReceive")


class Node:
    """One node process. Owns the store, the epoch history (cache and file), the Role with the
    MasterRole or ReplicationClient behind it, the features (messaging, admin), the gRPC server
    and the LiveConfig.

    Locking: `_role_lock` serializes role switches (leave the old role, take the new one, publish
    the Role state) and runtime config updates. Features read the Role and the LiveConfig
    without a lock (each is one reference to an immutable object).
    """

    def __init__(self, config: NodeConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.live = LiveConfig(config)
        self.clock = clock
        self.started_ms = clock.now_ms()  # the heartbeat's load counters count from here
        self.store = MessageStore(config.store, clock=clock)
        # Until messaging (and its consumer state) exists, retention deletes nothing early.
        self.store.consumer_progress = self._consumer_progress
        self.epoch_file = EpochFile(StoreLayout(config.store.store_path_root_dir).epoch_file)
        self.epochs = EpochCache()
        self.role = Role(config.node_id)
        self._master: MasterRole | None = None
        self._slave: ReplicationClient | None = None
        self.token_source = ""
        self.port = 0
        self.health = health.HealthServicer(experimental_non_blocking=True)
        self._server: AioGrpcServer | None = None
        self._role_lock = threading.RLock()
        self._health_watch = PeriodicTask("health-watch", self.update_health, 1.0)
        self.gate = MemberGate(None, config.node_id, clock)
        self.credentials = MemberCredentials(None, config.node_id)
        self.messaging: MessagingService | None = None
        self.link: ControllerLink | None = None
        self.shipper: ArchiveShipper | None = None
        self.metrics: MetricsEndpoint | None = None
        self.calls = CallCounter()  # gRPC calls by method and code, for the metrics
        self._last_refusal = ""
        # The group's advertised addresses as the controller last listed them (QueryRoute's
        # endpoints, cluster/messaging/messaging_service.py); () before its first answer.
        self.group_members: tuple[str, ...] = ()
        # The cluster's route from the controller's registry (every group's queues in
        # QueryRoute), and this node's registration while it leads (route_sync.py).
        self.routes = RouteSync(config.broker_name, config.node_id, self.role,
                                lambda: self.messaging)
        self.live.subscribe(self._on_config_change)

    def _ships_now(self) -> bool:
        """Whether this node ships to the archive now (archiveShipFrom)."""
        kind = self.role.kind
        if self.config.shipping.ship_from == "ANY":
            return kind is not None
        return kind is BrokerRole.SLAVE

    def _consumer_progress(self):
        """Consumer groups' positions for retention (diskPressurePolicy); None (unknown) before
        messaging starts and on a node that does not lead."""
        messaging = self.messaging
        return None if messaging is None else messaging.consumers.retention_progress()

    @property
    def config(self) -> NodeConfig:
        return self.live.current

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        c = self.config
        token, self.token_source = resolve_token(c.admin_token, c.admin_token_file,
                                                 c.default_token_path)
        secret = resolve_cluster_secret(c.cluster_secret, c.cluster_secret_file)
        self.gate = MemberGate(secret, c.node_id, self.clock)
        self.credentials = MemberCredentials(secret, c.node_id)
        if c.store.is_slave or self.controlled:
            # A slave serves only what its master confirmed. Recovery dispatches up to the
            # store's confirm bound, so set it (the confirm offset persisted in the checkpoint)
            # before load; otherwise a restarted slave would serve its unconfirmed tail. Under a
            # controller the node does not know its role yet: the same caution holds.
            store = self.store
            store.confirm_source = lambda: store.checkpoint_confirm_offset
        check_volumes(c.store)  # before any file is created: says which setting to lower
        if c.shipping.enabled:
            # Registered before load: retention waits for the archive from its first round.
            self.shipper = ArchiveShipper(StoreFiles(self.store), c.shipping, c.broker_name, c.node_id,
                                          self._ships_now, self.credentials, c.tls)
            self.store.attach_archive(self.shipper, self.shipper.released_up_to,
                                      self.shipper.held_up_to)
        self.store.load()
        self.store.start()
        self.epochs = EpochCache.from_entries(self.epoch_file.load())
        # Handles must hold on every node of the group (failover): the cluster secret is the
        # group's; a lone master without one uses its admin token (kept in its store).
        self.messaging = build_messaging(self.role, self.store, self.live, self.clock,
                                         self.advertised_address,
                                         handle_key(secret or token.encode()),
                                         group_members=lambda: self.group_members,
                                         cluster_route=lambda: self.routes.route,
                                         fresh_route=self._fresh_route)
        self.messaging.start()
        admin = AdminNode(node_id=c.node_id, role=self.role, store=self.store, config=self.live,
                          topics=self.messaging.topics, consumers=self.messaging.consumers,
                          status=self.status,
                          switch_role=self.switch_role, put_messages=self.put_messages,
                          update_config=self.update_config,
                          archive_shipper=lambda: self.shipper)
        # undecodable bytes are refused before the ACL check, which reads the request's fields
        server = AioGrpcServer(interceptors=[BearerTokenInterceptor(
                                   token, signed_admin=self.messaging.access.admin_refusal),
                                   UndecodableRequestInterceptor(),
                                   V2AccessInterceptor(self.messaging.access)],
                               options=server_options(c.limits, c.store.max_message_size),
                               outer=[self.calls], event_loop=c.server_event_loop)
        self._server = server
        replication = ReplicationServicer(lambda: self.role.master, self.role.not_master_reason,
                                          self._admit_replica)
        server.add(lambda s: add_replication_to_server(replication, s))
        server.add(lambda s: membership_pb2_grpc.add_MembershipServicer_to_server(
            MembershipServicer(self.gate), s))
        server.add(lambda s: admin_pb2_grpc.add_AdminServicer_to_server(AdminServicer(admin), s))
        server.add(lambda s: add_to_server(MessagingServicer(self.messaging), s))
        server.add(lambda s: add_to_server(BatchReceiveServicer(self.messaging), s))
        server.add(lambda s: health_pb2_grpc.add_HealthServicer_to_server(self.health, s))
        self.port = server.add_port(c.listen_address, c.tls)
        if self.port == 0:
            raise StoreError(f"cannot listen on {c.listen_address}")
        with self._role_lock:
            if self.controlled:
                self.role.set(Transitioning(f"waiting for the controller at "
                                            f"{c.controller_address}"))
            elif c.store.is_slave:
                self._become_slave(c.store.ha_master_address)
            else:
                self._become_master(c.store.broker_role, 0)
        server.start()
        if c.metrics_listen_address:
            self.metrics = MetricsEndpoint(c.metrics_listen_address, [NodeCollector(self)],
                                           pages=console.pages(),
                                           api=console.NodeApi(self).routes(), token=token,
                                           tls=c.tls)
        self._health_watch.start()
        self.update_health()
        if self.controlled:
            self.link = ControllerLink(c.controller_addresses, c.controller_heartbeat_interval_ms,
                                       self.clock, self.heartbeat_report, self.apply_assignment,
                                       self.credentials.metadata, tls=c.tls,
                                       routes=self.routes)
            self.link.start()
        log.info("node %s listening on %s:%d%s as %s (admin token: %s)", c.node_id,
                 c.store.broker_ip1, self.port, " with TLS" if c.tls.enabled else "",
                 self.role.name, self.token_source)

    def _fresh_route(self) -> ClusterRoute | None:
        """The controller's route now (blocking), before this node's group auto-creates a topic;
        None without a controller or when it cannot answer."""
        link = self.link
        return link.fetch_route() if link is not None else None

    def stop(self) -> None:
        if self.link is not None:
            self.link.stop()
        self._health_watch.stop()
        for name in ("", *SERVICES):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.metrics is not None:
            self.metrics.close()
        with self._role_lock:  # the replication client runs on the server's loop: first
            self._stop_replication()
        if self._server is not None:
            self._server.stop(grace=1.0)
        if self.messaging is not None:
            self.messaging.close()
        with self._role_lock:
            self._leave_role("node shutting down")
        self.store.shutdown()
        log.info("node %s stopped cleanly", self.config.node_id)

    def _admit_replica(self, peer: str, metadata) -> str:
        """The replication stream's admission: the node id the peer proved as a member."""
        try:
            return self.gate.admission(peer, metadata, REPLICATION_STREAM)
        except Refusal as e:
            raise NotAdmitted(e.code, e.message) from None

    @property
    def address(self) -> str:
        return f"{self.config.store.broker_ip1}:{self.port}"

    def advertised_address(self) -> str:
        """The IPv4 host:port clients reach this node at (advertisedAddress, or where it
        listens)."""
        c = self.config
        return c.advertised_address or self.address

    # -- roles ------------------------------------------------------------------------------
    @property
    def controlled(self) -> bool:
        """Roles come from a controller (controllerAddr), not from brokerRole or SwitchRole."""
        return bool(self.config.controller_address)

    def switch_role(self, role: BrokerRole | str, master_address: str = "", epoch: int = 0) -> None:
        """Become `role` (Admin.SwitchRole): a master in `epoch` (0: the next one), or a slave
        of `master_address`. Raises StoreError when `epoch` is not after this node's epoch, or
        when a controller assigns the roles."""
        if self.controlled:
            raise StoreError(f"{self.config.node_id} takes its role from the controller at "
                             f"{self.config.controller_address}: promote a node with `python -m "
                             f"cluster switch --to NODE` instead")
        role = BrokerRole.parse(role) if isinstance(role, str) else role
        with self._role_lock:
            self._switch_locked(role, master_address, epoch)

    def _switch_locked(self, role: BrokerRole, master_address: str, epoch: int) -> None:
        state = self.role.state
        if role is BrokerRole.SLAVE:
            if isinstance(state, Follower) and state.master_address == master_address:
                return
            self._leave_role(f"switching to SLAVE of {master_address}")
            self._become_slave(master_address)
            return
        if isinstance(state, Leader) and epoch in (0, self.epochs.last_epoch):
            self._set_store_role(role, "")  # SYNC <-> ASYNC in the same epoch
            state.master.sync_master = role is BrokerRole.SYNC_MASTER
            self.role.set(dataclasses.replace(state, kind=role))
            return
        if epoch and epoch <= self.epochs.last_epoch:
            raise StoreError(f"epoch {epoch} is not after this node's epoch "
                             f"{self.epochs.last_epoch}")
        self._leave_role(f"switching to {role}")
        self._become_master(role, epoch)

    def _set_store_role(self, role: BrokerRole, master_address: str) -> None:
        """Keep StoreConfig.broker_role true to the current role: store services read it (the
        schedule service delivers delayed messages only on a master; a slave's deliveries come
        from its master)."""
        self.live.update(lambda c: dataclasses.replace(c, store=dataclasses.replace(
            c.store, broker_role=role.value, ha_master_address=master_address)))

    def _become_master(self, role: BrokerRole, epoch: int) -> None:
        self._set_store_role(role, "")
        store = self.store
        end = store.prepare_for_writes()
        new_epoch = epoch or self.epochs.last_epoch + 1
        start = store.min_phy_offset() if len(self.epochs) == 0 else end
        self.epochs.append(new_epoch, start)
        self.epoch_file.save(self.epochs)
        master = MasterRole(store, self.epochs, self.config.broker_name, self.clock,
                            sync_master=role is BrokerRole.SYNC_MASTER,
                            lease=WriteLease(self.clock) if self.controlled else None)
        master.start()
        self._master = master
        self.role.set(Leader(role, new_epoch, master))
        log.info("now %s in epoch %d (starts at %d)", role, new_epoch, start)

    async def _replication_proof(self, channel) -> list[tuple[str, str]]:
        """The membership proof of a replication stream, asked over its grpc.aio channel on
        the server's loop (MemberCredentials: challenge, the call, header)."""
        request = self.credentials.challenge(REPLICATION_STREAM)
        answer = await membership_pb2_grpc.MembershipStub(channel).Challenge(request,
                                                                             timeout=5.0)
        return self.credentials.header(request, answer)

    def _become_slave(self, master_address: str) -> None:
        self._set_store_role(BrokerRole.SLAVE, master_address)
        assert self._server is not None  # the stream runs on the server's loop
        slave = ReplicationClient(self.store, self.epochs, self.epoch_file, master_address,
                                  self.config.node_id, self.config.broker_name, self.clock,
                                  self._server.loop,
                                  self._replication_proof,
                                  lambda address: open_channel(address, self.config.tls,
                                                               GRPC_OPTIONS, aio=True))
        slave.start()
        self._slave = slave
        self.role.set(Follower(master_address))

    def _leave_role(self, reason: str) -> None:
        self.role.set(Transitioning(reason))
        if self._master is not None:
            self._master.stop(reason)
            self._master = None
        self._stop_replication()

    def _stop_replication(self) -> None:
        if self._slave is not None:
            self._slave.stop()
            self._slave = None

    def _on_config_change(self, old: NodeConfig, new: NodeConfig) -> None:
        """The one path of a config change (LiveConfig.update). Store services, the MasterRole
        and the ReplicationClient read `store.config` when they use a key."""
        if new.store is not old.store:
            self.store.reconfigure(new.store)

    # -- the controller (controllerAddr) -----------------------------------------------------
    def heartbeat_report(self) -> cpb.NodeHeartbeat:
        c, store, state = self.config, self.store, self.role.state
        hb = cpb.NodeHeartbeat(
            cluster_name=c.cluster_name, broker_name=c.broker_name, node_id=c.node_id,
            address=self.advertised_address(), role=self.role.name,
            epoch=self.epochs.last_epoch, max_offset=store.max_phy_offset(),
            confirm_offset=store.confirm_offset or 0, healthy=store.writable,
            unhealthy_reason=store.not_writable_reason, priority=c.election_priority,
            preferred_role=c.store.broker_role.value,
            load=node_load(self.started_ms, store, self.messaging),
            route_version=self.routes.held_version)
        if isinstance(state, Leader):
            tracker = state.master.tracker
            hb.in_sync.extend(sorted(tracker.in_sync_ids()))
            hb.member_notes.update(tracker.member_notes())
            hb.min_in_sync_replicas = store.config.min_in_sync_replicas
        slave = self._slave
        if isinstance(state, Follower) and slave is not None:
            hb.following, hb.master_connected = slave.master_address, slave.connected
        return hb

    def apply_assignment(self, assignment: Assignment, sent_at: float) -> None:
        """Carry out the controller's answer to a heartbeat sent at `sent_at` (monotonic)."""
        if assignment.group_addresses:
            self.group_members = assignment.group_addresses  # one attribute: readers take no lock
        with self._role_lock:
            plan = plan_assignment(self.role.state, self.config.node_id, self.epochs.last_epoch,
                                   assignment)
            if plan.refusal:
                if plan.refusal != self._last_refusal:
                    log.warning("controller assignment not carried out: %s", plan.refusal)
                self._last_refusal = plan.refusal
                return
            self._last_refusal = ""
            if plan.switch_to is not None:
                log.info("the controller assigns %s%s", plan.switch_to.value,
                         f" of {plan.master_address}" if plan.master_address
                         else f" in epoch {plan.epoch}")
                self._switch_locked(plan.switch_to, plan.master_address, plan.epoch)
            master = self._master
            if plan.approved is not None and master is not None:
                master.tracker.set_approved(plan.approved)
                if master.lease is not None:
                    master.lease.renew(sent_at, plan.lease_ms)

    # -- writes -----------------------------------------------------------------------------
    def put_messages(self, msgs: list[Message]) -> PutResult:
        """Append through the master role; NotMaster on a slave or between roles."""
        return self.role.require_master().put_messages(msgs)

    # -- observability ----------------------------------------------------------------------
    def update_health(self) -> None:
        ok = not self.store.flags.has(running_flags.DISK_ERROR)
        state = (health_pb2.HealthCheckResponse.SERVING if ok
                 else health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in ("", *SERVICES):
            self.health.set(name, state)

    def status(self) -> apb.NodeStatus:
        messaging = self.messaging
        return node_status(self.config, self.role, self.store, self.epochs, self.address,
                           self._slave, self.link,
                           messaging.access.problem if messaging is not None else "")

    # -- runtime configuration (Admin.UpdateConfig) -----------------------------------------
    def update_config(self, change: Callable[[NodeConfig], NodeConfig]) -> NodeConfig:
        """Apply `change` (it changes only keys the running services read on every use:
        cluster/admin/runtime_config.py keeps that allow-list) under the role lock, so it never
        interleaves with a role switch's own change of brokerRole/haMasterAddress."""
        with self._role_lock:
            return self.live.update(change)

"""One node: the embedded store, its role (master or slave, switchable at runtime), and the
gRPC server with the Replication, Admin, RocketMQ 5 MessagingService (cluster/messaging/) and
grpc.health.v1 services on one port.

Start order: load and recover the store, read the epoch file, take the configured role, then
serve. Stop order (SIGTERM): stop serving, leave the role (sync waiters answered, streams
closed), shut the store down cleanly (flush, checkpoint, remove `abort`).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ha.epoch import EpochCache
from master.replication_servicer import ReplicationServicer
from master.role import MasterRole
from proto import admin_pb2 as apb
from proto import admin_pb2_grpc
from proto import replication_pb2_grpc
from proto.apache.rocketmq.v2 import service_pb2_grpc as messaging_pb2_grpc
from slave.replication_client import GRPC_OPTIONS, ReplicationClient
from store.clock import SYSTEM_CLOCK, Clock
from store.codec import Message
from store.epoch_file import EpochFile
from store.errors import StoreError
from store.layout import StoreLayout
from store.message_store import MessageStore
from store.put_result import PutResult, PutStatus
from store import running_flags
from store.service import Service

from .admin_service import AdminServicer
from .auth import BearerTokenInterceptor, resolve_token
from .messaging import SERVICE_NAME as MESSAGING_SERVICE, MessagingService, MessagingServicer
from .node_config import NodeConfig

log = logging.getLogger(__name__)
SERVICES = ("rmqstore.admin.v1.Admin", "rmqstore.replication.v1.Replication", MESSAGING_SERVICE)


class NotMaster(StoreError):
    """A write reached a slave."""


class _HealthWatch(Service):
    name = "health-watch"

    def __init__(self, node: "Node") -> None:
        super().__init__()
        self.node = node

    def step(self) -> None:
        self.node.update_health()

    def wait_interval(self) -> float:
        return 1.0


class Node:
    def __init__(self, config: NodeConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.store = MessageStore(config.store, clock=clock)
        self.epoch_file = EpochFile(StoreLayout(config.store.store_path_root_dir).epoch_file)
        self.epochs = EpochCache()
        self.role = config.store.broker_role
        self.master: MasterRole | None = None
        self.slave: ReplicationClient | None = None
        self.master_address = config.store.ha_master_address
        self.token_source = ""
        self.port = 0
        self.health = health.HealthServicer(experimental_non_blocking=True)
        self._server: grpc.Server | None = None
        self._role_lock = threading.Lock()
        self._health_watch = _HealthWatch(self)
        self.messaging: MessagingService | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        c = self.config
        token, self.token_source = resolve_token(c.admin_token, c.admin_token_file,
                                                 c.default_token_path)
        if c.store.is_slave:
            # A slave serves only what its master confirmed. Recovery dispatches up to the
            # store's confirm bound, so set it (the confirm offset persisted in the checkpoint)
            # before load; otherwise a restarted slave would serve its unconfirmed tail.
            store = self.store
            store.confirm_source = lambda: store.checkpoint.confirm_phy_offset
        self.store.load()
        self.store.start()
        self.epochs = EpochCache.from_entries(self.epoch_file.load())
        self.messaging = MessagingService(self)
        self.messaging.start()  # loads config/topics.json
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=96, thread_name_prefix="grpc"),
                             interceptors=[BearerTokenInterceptor(token)], options=GRPC_OPTIONS)
        replication_pb2_grpc.add_ReplicationServicer_to_server(
            ReplicationServicer(lambda: self.master, self._not_master_reason), server)
        admin_pb2_grpc.add_AdminServicer_to_server(AdminServicer(self), server)
        messaging_pb2_grpc.add_MessagingServiceServicer_to_server(
            MessagingServicer(self.messaging), server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        self.port = server.add_insecure_port(c.listen_address)
        if self.port == 0:
            raise StoreError(f"cannot listen on {c.listen_address}")
        self._server = server
        with self._role_lock:
            if c.store.is_slave:
                self._become_slave(c.store.ha_master_address)
            else:
                self._become_master(self.role, 0)
        server.start()
        self._health_watch.start()
        self.update_health()
        log.info("node %s listening on %s:%d as %s (admin token: %s)", c.node_id,
                 c.store.broker_ip1, self.port, self.role, self.token_source)

    def stop(self) -> None:
        self._health_watch.stop()
        for name in ("", *SERVICES):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self._server is not None:
            self._server.stop(grace=1.0).wait(5)
        if self.messaging is not None:
            self.messaging.close()
        with self._role_lock:
            self._leave_role("node shutting down")
        self.store.shutdown()
        log.info("node %s stopped cleanly", self.config.node_id)

    @property
    def address(self) -> str:
        return f"{self.config.store.broker_ip1}:{self.port}"

    # -- roles ------------------------------------------------------------------------------
    def switch_role(self, role: str, master_address: str = "", epoch: int = 0) -> None:
        with self._role_lock:
            if role == "SLAVE":
                if self.role == "SLAVE" and master_address == self.master_address:
                    return
                self._leave_role(f"switching to SLAVE of {master_address}")
                self._become_slave(master_address)
            else:
                if self.master is not None and epoch in (0, self.epochs.last_epoch):
                    self._set_store_role(role, "")
                    self.master.sync_master = role == "SYNC_MASTER"
                    self.role = role
                    return
                if epoch and epoch <= self.epochs.last_epoch:
                    raise StoreError(f"epoch {epoch} is not after this node's epoch "
                                     f"{self.epochs.last_epoch}")
                self._leave_role(f"switching to {role}")
                self._become_master(role, epoch)

    def _set_store_role(self, role: str, master_address: str) -> None:
        """Keep StoreConfig.broker_role true to the current role: store services read it (the
        schedule service delivers delayed messages only on a master; a slave's deliveries come
        from its master). StoreConfig is frozen, so every holder gets the new object."""
        old = self.config.store
        if old.broker_role == role and old.ha_master_address == master_address:
            return
        new = dataclasses.replace(old, broker_role=role, ha_master_address=master_address)
        for holder in (self.store, *self.store.extra_services, self.master, self.slave):
            if holder is not None and getattr(holder, "config", None) is old:
                holder.config = new
        self.config = dataclasses.replace(self.config, store=new)

    def _become_master(self, role: str, epoch: int) -> None:
        self._set_store_role(role, "")
        store = self.store
        end = store.prepare_for_writes()
        new_epoch = epoch or self.epochs.last_epoch + 1
        start = store.min_phy_offset() if len(self.epochs) == 0 else end
        self.epochs.append(new_epoch, start)
        self.epoch_file.save(self.epochs)
        self.master = MasterRole(store, self.epochs, self.config.broker_name, self.clock,
                                 sync_master=role == "SYNC_MASTER")
        self.master.start()
        self.role = role
        self.master_address = ""
        log.info("now %s in epoch %d (starts at %d)", role, new_epoch, start)

    def _become_slave(self, master_address: str) -> None:
        self._set_store_role("SLAVE", master_address)
        self.slave = ReplicationClient(self.store, self.epochs, self.epoch_file, master_address,
                                       self.config.node_id, self.config.broker_name, self.clock)
        self.slave.start()
        self.role = "SLAVE"
        self.master_address = master_address

    def _leave_role(self, reason: str) -> None:
        if self.master is not None:
            self.master.stop(reason)
            self.master = None
        if self.slave is not None:
            self.slave.stop()
            self.slave = None

    def _not_master_reason(self) -> str:
        if self.role == "SLAVE":
            return f"{self.config.node_id} is a slave of {self.master_address}"
        return f"{self.config.node_id} is changing role"

    # -- writes -----------------------------------------------------------------------------
    def put_messages(self, msgs: list[Message]) -> PutResult:
        master = self.master
        if master is None:
            raise NotMaster(f"writes go to the master: {self._not_master_reason()}")
        return master.put_messages(msgs)

    # -- observability ----------------------------------------------------------------------
    def update_health(self) -> None:
        ok = not self.store.flags.has(running_flags.DISK_ERROR)
        state = (health_pb2.HealthCheckResponse.SERVING if ok
                 else health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in ("", *SERVICES):
            self.health.set(name, state)

    def status(self) -> apb.NodeStatus:
        c, store = self.config, self.store
        st = apb.NodeStatus(
            node_id=c.node_id, cluster_name=c.cluster_name, broker_name=c.broker_name,
            broker_id=c.broker_id, role=self.role, address=self.address,
            epoch=self.epochs.last_epoch,
            epochs=[apb.EpochRange(epoch=e.epoch, start_offset=e.start_offset)
                    for e in self.epochs.entries],
            min_offset=store.min_phy_offset(), max_offset=store.max_phy_offset(),
            flushed_offset=store.flushed_offset, confirm_offset=store.confirm_offset or 0,
            dispatched_offset=store.reput.reput_from_offset, writable=store.writable,
            not_writable_reason=store.not_writable_reason, pid=os.getpid(),
            store_path=c.store.store_path_root_dir)
        master, slave = self.master, self.slave
        if master is not None:
            max_offset = st.max_offset
            peers = {conn.slave_id: conn.peer for conn in master.connections()}
            for s in master.slave_states():
                st.slaves.append(apb.SlaveStatus(
                    node_id=s.slave_id, peer=peers.get(s.slave_id, ""), ack_offset=s.ack_offset,
                    flushed_offset=s.flushed_offset, lag_bytes=max(0, max_offset - s.ack_offset),
                    in_sync=s.in_sync, last_ack_age_ms=s.last_ack_age_ms,
                    last_caught_up_age_ms=s.last_caught_up_age_ms))
            st.in_sync_set.extend(sorted(master.tracker.in_sync_ids()))
        if slave is not None:
            st.master_address = slave.master_address
            st.master_connected = slave.connected
            st.replication_error = slave.last_error
        return st

    # -- runtime configuration (Admin.UpdateConfig) -----------------------------------------
    def apply_runtime_config(self, config: NodeConfig) -> None:
        """Swap in `config`, which differs from the current one only in keys that the running
        services read on every use (cluster/admin_config.py keeps that allow-list). StoreConfig
        is frozen, so every holder of the old object gets the new one; the role lock keeps a
        role switch from building its MasterRole/ReplicationClient from the old config."""
        with self._role_lock:
            old = self.config.store
            for holder in (self.store, *self.store.extra_services, self.master, self.slave):
                if holder is not None and getattr(holder, "config", None) is old:
                    holder.config = config.store
            self.config = config
            if self.messaging is not None:
                self.messaging.topics.auto_create = config.auto_create_topic_enable
                self.messaging.topics.default_queue_nums = config.default_topic_queue_nums

"""A node's status as the Admin API reports it (apb.NodeStatus): identity, role, epochs, the
store's offsets and writability, and per role either the replication table of its slaves (a
master) or the state of its replication stream (a slave). Also the load its heartbeat carries
(cpb.NodeLoad: counters, consumer lag, disk), which the console's charts sample."""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from proto import admin_pb2 as apb
from proto import controller_pb2 as cpb
from store.retention.retention import default_disk_usage

if TYPE_CHECKING:
    from ha.epoch import EpochCache
    from slave.replication_client import ReplicationClient
    from store.message_store import MessageStore

    from .controller_link import ControllerLink
    from cluster.config.node_config import NodeConfig
    from cluster.config.node_role import Role
    from cluster.messaging.messaging_service import MessagingService

log = logging.getLogger(__name__)


def node_status(c: "NodeConfig", role: "Role", store: "MessageStore", epochs: "EpochCache",
                address: str, slave: "ReplicationClient | None",
                link: "ControllerLink | None" = None, acl_problem: str = "") -> apb.NodeStatus:
    st = apb.NodeStatus(
        node_id=c.node_id, cluster_name=c.cluster_name, broker_name=c.broker_name,
        broker_id=c.broker_id, role=role.name, address=address, epoch=epochs.last_epoch,
        epochs=[apb.EpochRange(epoch=e.epoch, start_offset=e.start_offset)
                for e in epochs.entries],
        min_offset=store.min_phy_offset(), max_offset=store.max_phy_offset(),
        flushed_offset=store.flushed_offset, confirm_offset=store.confirm_offset or 0,
        dispatched_offset=store.dispatched_offset, writable=store.writable,
        not_writable_reason=store.not_writable_reason, pid=os.getpid(),
        store_path=c.store.store_path_root_dir, acl_problem=acl_problem)
    master = role.master
    if master is not None:
        max_offset = st.max_offset
        peers = {conn.slave_id: conn.peer for conn in master.connections()}
        for s in master.slave_states():
            st.slaves.append(apb.SlaveStatus(
                node_id=s.slave_id, peer=peers.get(s.slave_id, ""), ack_offset=s.ack_offset,
                flushed_offset=s.flushed_offset, lag_bytes=max(0, max_offset - s.ack_offset),
                in_sync=s.in_sync, last_ack_age_ms=s.last_ack_age_ms,
                last_caught_up_age_ms=s.last_caught_up_age_ms,
                ack_latency_ms=s.ack_latency_ms, ack_latency_p99_ms=s.ack_latency_p99_ms,
                pending_ms=s.pending_ms, held_out=s.held_out,
                in_sync_changes=s.in_sync_changes, last_change=s.last_change,
                last_change_cause=s.last_cause,
                last_change_age_ms=s.last_change_age_ms, released_puts=s.released_puts,
                released_wait_ms=s.released_wait_ms))
        st.in_sync_set.extend(sorted(master.tracker.in_sync_ids()))
        if master.lease is not None:
            st.sync_state_set.extend(sorted(master.tracker.member_ids()))
            st.write_lease_valid = not master.lease_refusal()
    if slave is not None and role.followed_address:
        st.master_address = slave.master_address
        st.master_connected = slave.connected
        st.replication_error = slave.last_error
    if link is not None:
        st.controller = link.address
        st.controller_contact_age_ms = link.contact_age_ms()
        st.controller_note = link.note
    return st


def node_load(started_ms: int, store: "MessageStore",
              messaging: "MessagingService | None") -> cpb.NodeLoad:
    """What the heartbeat carries for the console (proto/controller.proto NodeLoad). Plain
    reads, no waiting: the consumer lag only once the master's consumer state is loaded (a
    new master's replay runs elsewhere, never in the heartbeat's thread)."""
    c = store.config
    load = cpb.NodeLoad(started_ms=started_ms, disk_used_ratio=disk_used_ratio(store),
                        disk_warning_ratio=c.disk_space_warning_level_ratio / 100.0,
                        disk_max_used_ratio=c.disk_max_used_space_ratio / 100.0)
    if messaging is None:
        return load
    load.sent_messages = messaging.sender.stored
    load.delivered_messages = (messaging.consumer_router.calls.delivered
                               + messaging.reader.pulled)
    consumers = messaging.consumers
    if consumers.table.loaded_for_current_master() is None:
        return load
    try:
        lags = {g.name: sum(q.lag for q in consumers.progress(g.name))
                for g in consumers.list_groups()}
    except Exception:  # noqa: BLE001 - a role change under the read: unknown this beat
        log.debug("consumer lag unavailable", exc_info=True)
        return load
    load.consumer_lag.update(lags)
    load.consumer_lag_known = True
    return load


def disk_used_ratio(store: "MessageStore") -> float:
    """The fuller of the commitlog's and the store root's file systems (0..1); -1: unknown."""
    c = store.config
    ratios = []
    for path in dict.fromkeys((c.commit_log_dir, c.store_path_root_dir)):
        try:
            ratios.append(default_disk_usage(path))
        except OSError:
            log.debug("disk usage of %s unavailable", path, exc_info=True)
    return max(ratios, default=-1.0)

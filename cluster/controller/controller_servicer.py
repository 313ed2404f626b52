"""gRPC adapter of the controller (proto/controller.proto): maps messages to the service's plain
objects and back. Heartbeats come only from members (MemberGate: a proof over the cluster
secret, for the node id the heartbeat names), and so do archives' announcements, the masters'
topic registrations and the nodes' route fetches; GetGroups, SwitchMaster and ListArchives need
the admin token (BearerTokenInterceptor, see cluster/assembly/controller_process.py)."""
from __future__ import annotations

import logging
from types import MappingProxyType

import grpc

from proto import controller_pb2 as pb
from proto import controller_pb2_grpc as pb_grpc
from common.clock import SYSTEM_CLOCK, Clock
from store.errors import StoreError

from cluster.controller.active_gate import NotActiveController
from cluster.controller.archive_directory import ArchiveDirectory
from cluster.controller.controller_service import ControllerService, GroupSnapshot
from cluster.controller.election import Assignment, NodeReport, SwitchRefused
from cluster.controller.node_load import NodeLoad
from cluster.controller.route_registry import RegistrationRefused
from cluster.controller.route_wire import route_to_pb, topics_from_pb
from cluster.security.member_gate import MemberGate
from cluster.security.member_proof import (ARCHIVE_ANNOUNCE, CONTROLLER_HEARTBEAT,
                                           GET_CLUSTER_ROUTE, REGISTER_TOPICS)

log = logging.getLogger(__name__)
SERVICE = "rmqstore.controller.v1.Controller"
PROTECTED_METHODS = (f"/{SERVICE}/GetGroups", f"/{SERVICE}/SwitchMaster",
                     f"/{SERVICE}/ListArchives")


def report_from(hb: pb.NodeHeartbeat) -> NodeReport:
    return NodeReport(node_id=hb.node_id, address=hb.address, role=hb.role, epoch=hb.epoch,
                      max_offset=hb.max_offset, healthy=hb.healthy,
                      unhealthy_reason=hb.unhealthy_reason, in_sync=frozenset(hb.in_sync),
                      priority=hb.priority, preferred_role=hb.preferred_role,
                      member_notes=MappingProxyType(dict(hb.member_notes)),
                      min_in_sync_replicas=hb.min_in_sync_replicas,
                      load=load_from_pb(hb.load) if hb.HasField("load") else None,
                      route_version=hb.route_version)


def load_from_pb(load: pb.NodeLoad) -> NodeLoad:
    lag = MappingProxyType(dict(load.consumer_lag)) if load.consumer_lag_known else None
    return NodeLoad(started_ms=load.started_ms, sent_messages=load.sent_messages,
                    delivered_messages=load.delivered_messages, consumer_lag=lag,
                    disk_used_ratio=load.disk_used_ratio,
                    disk_warning_ratio=load.disk_warning_ratio,
                    disk_max_used_ratio=load.disk_max_used_ratio)


def assignment_to_pb(a: Assignment) -> pb.Assignment:
    return pb.Assignment(role=a.role.value if a.role is not None else "",
                         master_address=a.master_address, master_id=a.master_id, epoch=a.epoch,
                         sync_state_set=sorted(a.sync_state_set),
                         sync_state_epoch=a.sync_state_epoch, note=a.note, lease_ms=a.lease_ms,
                         group_addresses=list(a.group_addresses),
                         registered_topics_version=a.registered_topics_version,
                         route_version=a.route_version)


def group_to_pb(g: GroupSnapshot) -> pb.GroupView:
    rec = g.record
    view = pb.GroupView(broker_name=rec.broker_name, master_id=rec.master_id,
                        master_address=rec.addresses.get(rec.master_id, ""), epoch=rec.epoch,
                        sync_state_set=sorted(rec.sync_state_set),
                        sync_state_epoch=rec.sync_state_epoch, master_role=rec.master_role.value,
                        note=g.note)
    for node_id in sorted(set(rec.addresses) | set(g.reports)):
        seen = g.reports.get(node_id)
        node = pb.NodeView(node_id=node_id, address=rec.addresses.get(node_id, ""),
                           in_sync_state_set=node_id in rec.sync_state_set,
                           last_heartbeat_age_ms=-1)
        if seen is not None:
            r, age = seen
            node.role, node.epoch, node.max_offset = r.role, r.epoch, r.max_offset
            node.healthy, node.unhealthy_reason = r.healthy, r.unhealthy_reason
            node.last_heartbeat_age_ms, node.priority = int(age * 1000), r.priority
            node.route_version = r.route_version
        view.nodes.append(node)
    for e in rec.elections:
        view.elections.append(pb.Election(at_ms=e.at_ms, epoch=e.epoch, master_id=e.master_id,
                                          previous_master_id=e.previous_master_id,
                                          reason=e.reason))
    for c in rec.sync_state_changes:
        view.sync_state_changes.append(pb.SyncStateChange(
            at_ms=c.at_ms, sync_state_epoch=c.sync_state_epoch, node_id=c.node_id,
            added=c.added, reason=c.reason))
    return view


class ControllerServicer(pb_grpc.ControllerServicer):
    """The controller's gRPC adapter (the module docstring): admits members' heartbeats and
    archives' announcements through the MemberGate, maps messages to the ControllerService's
    objects and back, and turns its refusals into call statuses. Holds no state of its own
    (the service and the ArchiveDirectory lock theirs); calls run in the server's pool."""

    def __init__(self, service: ControllerService, address: str, gate: MemberGate,
                 archives: ArchiveDirectory | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.service = service
        self.address = address
        self.gate = gate
        self.archives = archives or ArchiveDirectory()
        self.clock = clock

    def Heartbeat(self, request, context):  # noqa: N802
        member_id = self.gate.admit(context, CONTROLLER_HEARTBEAT)
        if not request.broker_name or not request.node_id or not request.address:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "a heartbeat needs broker_name, node_id and address")
        if request.node_id != member_id:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"the heartbeat names {request.node_id!r} but the peer proved "
                          f"membership as {member_id!r}")
        try:
            answer = self.service.heartbeat(request.broker_name, report_from(request))
        except NotActiveController as e:  # a standby: the node moves on to the active one
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except StoreError as e:  # the state could not be persisted: answer nothing
            log.error("cannot persist the controller state: %s", e)
            context.abort(grpc.StatusCode.UNAVAILABLE, f"the controller cannot persist: {e}")
        return assignment_to_pb(answer)

    def GetGroups(self, request, context):  # noqa: N802
        try:
            groups = self.service.snapshots()
            route = self.service.cluster_route()
        except NotActiveController as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        return pb.GroupsView(groups=[group_to_pb(g) for g in groups],
                             controller_address=self.address, route=route_to_pb(route))

    def RegisterTopics(self, request, context):  # noqa: N802
        member_id = self.gate.admit(context, REGISTER_TOPICS)
        if request.node_id != member_id:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"the registration names {request.node_id!r} but the peer proved "
                          f"membership as {member_id!r}")
        try:
            version = self.service.register_topics(
                request.broker_name, request.node_id, request.version, request.endpoints,
                topics_from_pb(request.topics))
        except KeyError:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"no broker group {request.broker_name!r} has reported to this "
                          f"controller")
        except ValueError as e:  # ConfigError too
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"bad registration of {request.broker_name!r}: {e}")
        except (RegistrationRefused, NotActiveController) as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        log.info("group %s: %s registered %d topic(s) (version %s)", request.broker_name,
                 request.node_id, len(request.topics), request.version)
        return pb.RegistrationAck(route_version=version)

    def GetClusterRoute(self, request, context):  # noqa: N802
        self.gate.admit(context, GET_CLUSTER_ROUTE)
        try:
            return route_to_pb(self.service.cluster_route())
        except NotActiveController as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))

    def SwitchMaster(self, request, context):  # noqa: N802
        log.warning("SwitchMaster by %s: %s to %s", context.peer(), request.broker_name,
                    request.node_id)
        try:
            return group_to_pb(self.service.switch_master(request.broker_name, request.node_id))
        except KeyError:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"no broker group {request.broker_name!r} has reported to this controller")
        except (SwitchRefused, NotActiveController) as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except StoreError as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"the controller cannot persist: {e}")

    def AnnounceArchive(self, request, context):  # noqa: N802
        self.gate.admit(context, ARCHIVE_ANNOUNCE)
        try:
            self.archives.announce(request, self.clock.monotonic())
        except ValueError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return pb.ArchiveAnnouncementAck()

    def ListArchives(self, request, context):  # noqa: N802
        return pb.ArchiveList(archives=self.archives.archives(self.clock.monotonic()))

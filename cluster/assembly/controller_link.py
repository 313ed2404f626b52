"""A node's line to its controller: a heartbeat every controllerHeartbeatInterval, and each
answer handed to the node, which carries it out (cluster/assembly/assignment_plan.py decides what
that means). An answer also renews a master's write lease from the moment its heartbeat was
sent (master/write_lease.py), so a master that cannot reach the controller stops on time.
After the answer is carried out, the route registry's part (route_sync.py) on the same
controller: a master registers its group's topics when the answer shows another version than
its own, and a node fetches the cluster's route when the answer names another version than the
one it holds. Either failing is logged once and tried again after the next answer (the
versions still differ).

Several controllers (`controllerAddr=a:p;b:p`, controllers sharing their state in etcd): only
the active one answers; a standby refuses with FAILED_PRECONDITION naming the active one. The
link keeps sending to the one that answered last; when it is UNAVAILABLE, too slow or refuses,
the same heartbeat goes to the controller the refusal named, else to the next in the list,
each tried at most once per round (controller_choice.py decides the order). Only an answer
renews the write lease, and only the active controller answers, so a standby never keeps a
deposed master writing.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Sequence

import grpc

from proto import controller_pb2 as pb
from proto import controller_pb2_grpc as pb_grpc
from store.broker_role import BrokerRole
from common.clock import Clock
from common.service import Service

from cluster.config.cluster_route import ClusterRoute
from cluster.controller.election import Assignment
from cluster.controller.route_wire import route_from_pb
from .controller_choice import ControllerChoice
from .route_sync import RouteSync
from cluster.security.member_proof import (CONTROLLER_HEARTBEAT, GET_CLUSTER_ROUTE,
                                           REGISTER_TOPICS, MembershipRefused)
from cluster.security.tls import TlsSettings, open_channel
from cluster.v2.v2_status import V2Error

log = logging.getLogger(__name__)
# A controller that was down reconnects within a second, not gRPC's default backoff (up to
# two minutes): it may be the active one the next time the link comes round to it.
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 200),
                   ("grpc.min_reconnect_backoff_ms", 200),
                   ("grpc.max_reconnect_backoff_ms", 1000)]
MOVE_ON = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION,
           grpc.StatusCode.DEADLINE_EXCEEDED)


def assignment_from_pb(a: pb.Assignment) -> Assignment:
    return Assignment(role=BrokerRole.parse(a.role) if a.role else None,
                      master_address=a.master_address, master_id=a.master_id, epoch=a.epoch,
                      sync_state_set=frozenset(a.sync_state_set),
                      sync_state_epoch=a.sync_state_epoch, note=a.note, lease_ms=a.lease_ms,
                      group_addresses=tuple(a.group_addresses),
                      registered_topics_version=a.registered_topics_version,
                      route_version=a.route_version)


class ControllerLink(Service):
    """Owns a channel per controller, which one is current, and what the controllers last said
    (`_lock` guards the latter two: status reads them from other threads). The node's callbacks
    and the route registry's calls (`routes`, its RouteSync) run on this service's thread."""
    name = "controller-link"

    def __init__(self, addresses: list[str] | str, interval_ms: int, clock: Clock,
                 report: Callable[[], pb.NodeHeartbeat],
                 apply: Callable[[Assignment, float], None],
                 credentials: Callable[[grpc.Channel, str, float], Sequence[tuple[str, str]]],
                 tls: TlsSettings | None = None, routes: RouteSync | None = None) -> None:
        super().__init__()
        self.choice = ControllerChoice(addresses.split(";") if isinstance(addresses, str)
                                       else addresses)
        self.interval_ms = interval_ms
        self.clock = clock
        self._report = report
        self._apply = apply
        self._credentials = credentials  # (channel, purpose, timeout): proof for one call
        self.routes = routes
        self._route_problem = ""
        self._channels = {a: open_channel(a, tls, CHANNEL_OPTIONS)
                          for a in self.choice.addresses}
        self._stubs = {a: pb_grpc.ControllerStub(c) for a, c in self._channels.items()}
        self._lock = threading.Lock()
        self._last_contact: float | None = None
        self._note = ""

    @property
    def address(self) -> str:
        """The controller heartbeats go to first (the one that answered last)."""
        with self._lock:
            return self.choice.current

    def step(self) -> None:
        heartbeat = self._report()
        failures: list[str] = []
        for address in self.choice.round():
            sent_at = self.clock.monotonic()  # before the challenge: the lease errs early
            timeout = max(1.0, 2 * self.interval_ms / 1000)
            try:
                # the challenge shares the heartbeat's timeout: a hung controller must not
                # delay moving on to the next one
                metadata = self._credentials(self._channels[address], CONTROLLER_HEARTBEAT,
                                             timeout)
                answer = self._stubs[address].Heartbeat(heartbeat, timeout=timeout,
                                                        metadata=metadata)
            except MembershipRefused as e:  # not a member: the next controller may be one
                failures.append(f"{address}: {e}")
                self.choice.refused(address, "")
                continue
            except grpc.RpcError as e:
                code = e.code() if hasattr(e, "code") else None
                detail = e.details() if hasattr(e, "details") else str(e)
                failures.append(f"{address}: {code.name if code else '?'}: {detail}")
                if code in MOVE_ON:
                    self.choice.refused(address, detail if code is
                                        grpc.StatusCode.FAILED_PRECONDITION else "")
                    continue
                break
            self._answered(address, assignment_from_pb(answer), sent_at)
            return
        with self._lock:
            first = not self._note.startswith("cannot reach")
            self._note = "cannot reach an active controller: " + "; ".join(failures)
        if first:
            log.warning("%s", self._note)

    def _answered(self, address: str, assignment: Assignment, sent_at: float) -> None:
        with self._lock:
            moved = address != self.choice.current
            self.choice.answered(address)
            if self._note.startswith("cannot reach") or moved:
                log.info("the controller at %s answers", address)
            self._last_contact = self.clock.monotonic()
            self._note = assignment.note
        self._apply(assignment, sent_at)
        if self.routes is not None:
            self._sync_routes(address, assignment)

    def _sync_routes(self, address: str, assignment: Assignment) -> None:
        """RegisterTopics and GetClusterRoute as the answer calls for (the module docstring)."""
        routes, channel, stub = self.routes, self._channels[address], self._stubs[address]
        assert routes is not None
        timeout = max(1.0, 2 * self.interval_ms / 1000)
        route_version = assignment.route_version
        problem = ""
        try:
            own = routes.registration_version()
            if routes.must_register(own, assignment.registered_topics_version):
                assert own is not None
                ack = stub.RegisterTopics(routes.registration(own), timeout=timeout,
                                          metadata=self._credentials(channel, REGISTER_TOPICS,
                                                                     timeout))
                route_version = ack.route_version
                log.info("registered the group's topics with the controller at %s (%s)",
                         address, own)
            if routes.wants(route_version):
                self._take_route(address, timeout)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            problem = f"{code.name if code else '?'}: {e.details() if hasattr(e, 'details') else e}"
        except (MembershipRefused, ValueError, V2Error) as e:
            problem = str(e)  # ValueError: a route we cannot read; V2Error: our own table
        if problem and problem != self._route_problem:
            log.warning("route registry at %s: %s (tried again after the next answer)",
                        address, problem)
        self._route_problem = problem

    def fetch_route(self) -> ClusterRoute | None:
        """The cluster's route asked of the current controller now, and taken (a master about
        to auto-create a topic: another group may have registered it since this node's last
        heartbeat). Blocks up to a second; None when the controller cannot answer, and the
        caller goes on with the route the node holds, as without a controller."""
        if self.routes is None:
            return None
        address = self.address
        try:
            self._take_route(address, 1.0)
        except (grpc.RpcError, MembershipRefused, ValueError) as e:
            log.info("the route from the controller at %s before an auto-create: %s", address, e)
            return None
        return self.routes.route

    def _take_route(self, address: str, timeout: float) -> None:
        """GetClusterRoute at `address`, taken into the node's route (RouteSync.take)."""
        assert self.routes is not None
        answer = self._stubs[address].GetClusterRoute(
            pb.ClusterRouteRequest(), timeout=timeout,
            metadata=self._credentials(self._channels[address], GET_CLUSTER_ROUTE, timeout))
        self.routes.take(route_from_pb(answer))

    def wait_interval(self) -> float:
        return self.interval_ms / 1000.0

    def on_stop(self) -> None:
        for channel in self._channels.values():
            channel.close()

    def contact_age_ms(self) -> int:
        with self._lock:
            if self._last_contact is None:
                return -1
            return int((self.clock.monotonic() - self._last_contact) * 1000)

    @property
    def note(self) -> str:
        with self._lock:
            return self._note

"""A node's side of the controller's route registry (cluster/controller/route_registry.py):
what it registers while it is its group's master, and the cluster's route it holds.

After each answer of the controller (cluster/assembly/controller_link.py):
- a master whose `registration_version()` differs from the Assignment's
  registered_topics_version sends RegisterTopics with `registration()`: the group's endpoints
  (those QueryRoute lists for the group, MessagingService.group_addresses) and its whole topic
  table. The version is the table's dataVersion (changes, timestamp) and a digest of the
  endpoints, so any change of either, a new master or a controller that holds nothing (after
  its restart or a takeover) makes the master register again, and nothing else does;
- a node whose held route version differs from the Assignment's route_version fetches
  GetClusterRoute and takes it (`take`: merged with the route it held, ClusterRoute.merged).

`route` is read by the client API (QueryRoute, QueryAssignment) from the server's threads: one
reference to an immutable ClusterRoute, replaced whole, so readers take no lock. Two threads
replace it: the link's after a heartbeat, and a pool thread when a master about to auto-create
a topic asks the controller first (ControllerLink.fetch_route); `_take_lock` makes each merge
whole. Either may land an answer older than the other's: the next heartbeat names the newer
version and the link fetches it again.
"""
from __future__ import annotations

import threading
import zlib
from typing import TYPE_CHECKING, Callable

from proto import controller_pb2 as pb

from cluster.config.cluster_route import ClusterRoute
from cluster.controller.route_wire import topic_to_pb

if TYPE_CHECKING:
    from cluster.config.node_role import Role
    from cluster.messaging.messaging_service import MessagingService


def registration_version(changes: int, timestamp: int, endpoints: list[str]) -> str:
    """The version a master registers under (see the module docstring)."""
    digest = zlib.crc32(",".join(sorted(endpoints)).encode())
    return f"c{changes}-t{timestamp}-e{digest:08x}"


class RouteSync:
    """Owns the route this node holds (`route`, one reference replaced whole by the link's
    thread) and builds its group's registration while it leads. `_take_lock` orders the
    replacements; readers take no lock (see the module docstring)."""

    def __init__(self, broker_name: str, node_id: str, role: "Role",
                 messaging: Callable[[], "MessagingService | None"]) -> None:
        self.broker_name = broker_name
        self.node_id = node_id
        self.role = role
        self._messaging = messaging
        self.route: ClusterRoute | None = None
        self._take_lock = threading.Lock()

    @property
    def held_version(self) -> str:
        route = self.route
        return route.version if route is not None else ""

    def registration_version(self) -> str | None:
        """This master's version of its registration; None when it does not lead (or its
        table cannot be read now: it registers at a later heartbeat)."""
        messaging = self._messaging()
        if messaging is None or self.role.master is None:
            return None
        try:
            timestamp, changes = messaging.topics.table.data_version
        except Exception:  # noqa: BLE001 - between roles, or the table cannot be read now
            return None
        return registration_version(changes, timestamp, messaging.group_addresses())

    @staticmethod
    def must_register(own_version: str | None, registered_version: str) -> bool:
        """A master registers when the controller holds another version than its own."""
        return own_version is not None and own_version != registered_version

    def registration(self, version: str) -> pb.TopicRegistration:
        messaging = self._messaging()
        assert messaging is not None
        return pb.TopicRegistration(broker_name=self.broker_name, node_id=self.node_id,
                                    version=version, endpoints=messaging.group_addresses(),
                                    topics=[topic_to_pb(t) for t in messaging.topics.all()])

    def wants(self, route_version: str) -> bool:
        """A route of this version differs from the one held: fetch it."""
        return bool(route_version) and route_version != self.held_version

    def take(self, route: ClusterRoute) -> None:
        with self._take_lock:
            self.route = route.merged(self.route)

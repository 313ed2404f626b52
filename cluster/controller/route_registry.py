"""The cluster's route registry (RocketMQ's name server), without I/O: which broker groups exist,
where clients reach each one, whether it has a master now, and its topics.

Two inputs:
- `observe(...)`: the election's view of a group (its master while it has one, the addresses
  of its nodes), fed by the controller service after every heartbeat, tick and switch.
- `register(...)`: a group's master registers the group's endpoints and its whole topic table
  with a version of its own choosing (its table's data version and its endpoints). Only the
  node the election made master and that serves now may register: a deposed master's late
  registration is refused, and a refused registration changes nothing.

One output, `route()`: a ClusterRoute (cluster/config/cluster_route.py) whose version changes
with every change of a group's endpoints, master or topics (not with its note, which is for
operators) and is new after every start: `<incarnation>-<counter>`, the incarnation random per
registry, so a node never mistakes a restarted controller's route for the one it holds.

Like RocketMQ's name server the registry is kept in memory only: a controller that starts (or
takes over) knows no group's topics until its master registers again, which the master does
at its next heartbeat, because the Assignment then carries no registered version of its group.
Until then the group is routed with `registered` false (nodes keep their previous topics for
it: ClusterRoute.merged).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

from store.json_config import TopicConfig

from cluster.config.cluster_route import ClusterRoute, GroupRoute
from cluster.config.node_config import check_ipv4_address


class RegistrationRefused(Exception):
    """A registration from a node that is not the group's serving master (the message says
    who is); nothing changed."""


@dataclass
class _Group:
    """What the registry knows of one group."""
    master_id: str = ""
    master_address: str = ""
    note: str = ""
    addresses: tuple[str, ...] = ()  # of the nodes heard from (the election's record)
    endpoints: tuple[str, ...] = ()  # registered by its master; () before any registration
    topics: dict[str, TopicConfig] | None = None  # None: never registered here
    version: str = ""  # the registered version

    def route(self, name: str) -> GroupRoute:
        return GroupRoute(name, master_id=self.master_id, master_address=self.master_address,
                          note=self.note, endpoints=self.endpoints or self.addresses,
                          registered=self.topics is not None,
                          topics=(self.topics or {}).values(), topics_version=self.version)


@dataclass
class RouteRegistry:
    """Owns every group's route entry and the route's version counter. Not thread-safe: the
    controller service calls it under its lock (cluster/controller/controller_service.py)."""

    incarnation: str = field(default_factory=lambda: os.urandom(4).hex())
    _counter: int = 0
    _groups: dict[str, _Group] = field(default_factory=dict)

    @property
    def version(self) -> str:
        return f"{self.incarnation}-{self._counter}"

    def observe(self, broker_name: str, master_id: str, master_address: str, note: str,
                addresses: Iterable[str]) -> None:
        """The election's view of a group: `master_id` and `master_address` of its serving
        master ("" while it has none), why it has none, the addresses of its nodes."""
        group = self._groups.get(broker_name)
        if group is None:
            group = self._groups[broker_name] = _Group()
            self._counter += 1
        addresses = tuple(sorted(addresses))
        if (group.master_id, group.master_address, group.addresses) != \
                (master_id, master_address, addresses):
            group.master_id, group.master_address = master_id, master_address
            group.addresses = addresses
            self._counter += 1
        group.note = note

    def register(self, broker_name: str, node_id: str, version: str,
                 endpoints: Iterable[str], topics: Iterable[TopicConfig]) -> str:
        """Take the group's registration from its master; the route's version after it.
        KeyError: no such group; RegistrationRefused: `node_id` is not its serving master;
        ValueError (ConfigError): a bad endpoint or a topic listed twice. Nothing changes on a
        refusal."""
        group = self._groups[broker_name]
        if node_id != group.master_id or not group.master_address:
            master = group.master_id if group.master_address else "none now"
            raise RegistrationRefused(f"{node_id} is not the master of broker group "
                                      f"{broker_name} (its master: {master}); only the master "
                                      f"registers the group's topics")
        endpoints = tuple(dict.fromkeys(check_ipv4_address("endpoint", e) for e in endpoints))
        if not endpoints:
            raise ValueError(f"the registration of {broker_name} names no endpoint")
        table = dict(GroupRoute(broker_name, topics=topics).topics)  # refuses duplicates
        if (group.endpoints, group.topics) != (endpoints, table):
            group.endpoints, group.topics = endpoints, table
            self._counter += 1
        group.version = version
        return self.version

    def registered_version(self, broker_name: str) -> str:
        """The version of the group's registration held here ("" none)."""
        group = self._groups.get(broker_name)
        return group.version if group is not None else ""

    def route(self) -> ClusterRoute:
        return ClusterRoute(self.version, tuple(g.route(name)
                                                for name, g in self._groups.items()))

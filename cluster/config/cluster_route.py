"""The cluster's route: every broker group's endpoints, master and topics, as the controller's
route registry holds it (cluster/controller/route_registry.py) and every node keeps the last
copy it fetched (proto/controller.proto ClusterRoute is the wire form).

A node answers QueryRoute for the other groups from its copy
(cluster/messaging/messaging_service.py); its own group's part comes from its own topic table.

`merged(previous)`: a controller that has not heard a group's registration since it started
(a restart, a takeover among controllers on etcd) routes that group without topics until the
group's master registers again, at its next heartbeat. A node taking such a route keeps, for
that group, the topics and endpoints of the route it had, so a client asking meanwhile still
gets every group's queues.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Iterable, Mapping

from common.config_values import ConfigError
from store.json_config import PERM_WRITE, TopicConfig


def routed_config(config: TopicConfig, has_master: bool) -> TopicConfig:
    """The topic as a route serves it: without PERM_WRITE while its group has no master (the
    official producers send only to writable queues; consumers keep reading them)."""
    return config if has_master else replace(config, perm=config.perm & ~PERM_WRITE)


def _topic_map(topics: Iterable[TopicConfig] | Mapping[str, TopicConfig]
               ) -> Mapping[str, TopicConfig]:
    items = topics.values() if isinstance(topics, Mapping) else topics
    out: dict[str, TopicConfig] = {}
    for t in items:
        if t.topic_name in out:
            raise ConfigError(f"topic {t.topic_name!r} is listed twice")
        out[t.topic_name] = t
    return MappingProxyType(dict(sorted(out.items())))


@dataclass(frozen=True)
class GroupRoute:
    """One broker group in the route: its master (`master_address` "" while it has none: its
    queues are then not writable), its endpoints (what clients dial for its queues), whether
    its topics are known (`registered`) and its topics by name (given as any iterable of
    TopicConfig; kept as a read-only mapping sorted by name). Raises ConfigError when a topic
    is listed twice or the name is empty."""

    broker_name: str
    master_id: str = ""
    master_address: str = ""
    note: str = ""
    endpoints: tuple[str, ...] = ()
    registered: bool = False
    topics: Mapping[str, TopicConfig] = field(default_factory=lambda: MappingProxyType({}))
    topics_version: str = ""

    def __post_init__(self) -> None:
        if not self.broker_name:
            raise ConfigError("a group of the route needs its broker name")
        object.__setattr__(self, "endpoints", tuple(self.endpoints))
        object.__setattr__(self, "topics", _topic_map(self.topics))

    @property
    def has_master(self) -> bool:
        return bool(self.master_address)


@dataclass(frozen=True)
class ClusterRoute:
    """The route of every group (sorted by broker name) and its version (compared for equality
    only: see proto/controller.proto ClusterRoute)."""

    version: str = ""
    groups: tuple[GroupRoute, ...] = ()

    def __post_init__(self) -> None:
        groups = tuple(sorted(self.groups, key=lambda g: g.broker_name))
        names = [g.broker_name for g in groups]
        if len(set(names)) != len(names):
            raise ConfigError(f"a group is listed twice in the route: {names}")
        object.__setattr__(self, "groups", groups)

    def group(self, broker_name: str) -> GroupRoute | None:
        return next((g for g in self.groups if g.broker_name == broker_name), None)

    def holding(self, topic: str) -> list[tuple[GroupRoute, TopicConfig]]:
        """The groups that have `topic`, with its config in each, by broker name."""
        return [(g, g.topics[topic]) for g in self.groups if topic in g.topics]

    def masterless(self) -> list[str]:
        """The groups without a master now."""
        return [g.broker_name for g in self.groups if not g.has_master]

    def merged(self, previous: "ClusterRoute | None") -> "ClusterRoute":
        """This route, where a group that is not `registered` keeps the topics and endpoints
        `previous` had for it (see the module docstring)."""
        if previous is None:
            return self
        groups = []
        for g in self.groups:
            old = previous.group(g.broker_name)
            if not g.registered and old is not None and old.topics:
                g = replace(g, topics=old.topics, endpoints=old.endpoints or g.endpoints,
                            topics_version=old.topics_version)
            groups.append(g)
        return ClusterRoute(self.version, tuple(groups))

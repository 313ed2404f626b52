"""The controller's state for every broker group, and the one place it changes.

Each group is a GroupElection (election.py: the rules, no I/O). This service feeds it
heartbeats, ticks and switch requests under one lock, and persists every change before it
answers, so an approved sync state set or an election is on disk before any node acts on it:
a controller that restarts never hands out an older epoch or a set that lost a member it had
already dropped.

Persistence goes through a `StateStore`: `FileStateStore` keeps every group in one JSON file
written atomically (tmp + fsync + rename, the previous version in `.bak`) for a controller of
its own; `EtcdStateStore` (etcd_store.py) keeps each group under its own etcd key for
controllers that share their state.

Several controllers on etcd: only the active one answers (the `ActiveGate`, leadership.py);
a standby holds no groups and refuses with NotActiveController. On taking over, `reload()`
reads every group afresh, the same path as a restart: each group starts its settle window and
counts its nodes alive for a failover timeout, so no master is failed over before its
heartbeats reach the new controller. A save refused by the store (NotActiveController: the
lease is gone) steps the controller down and drops its groups before anything is answered.

The cluster's route (route_registry.py, in memory only) is fed here too, under the same lock:
each group's serving master and node addresses after every heartbeat, tick and switch, and the
masters' registrations; every Assignment carries the registry's version of the group's
registration and of the route. A reload (start, takeover) starts an empty registry.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass
from typing import Iterable, Protocol

from common.clock import Clock
from store.json_config import JsonConfigFile, TopicConfig

from cluster.config.cluster_route import ClusterRoute
from cluster.controller.active_gate import ALWAYS_ACTIVE, ActiveGate, NotActiveController
from cluster.controller.election import (Assignment, ElectionConfig, GroupElection, GroupRecord,
                                         NodeReport)
from cluster.controller.route_registry import RouteRegistry

log = logging.getLogger(__name__)


class StateStore(Protocol):
    def load(self) -> dict[str, GroupRecord]: ...
    def save(self, groups: dict[str, GroupRecord]) -> None: ...


class FileStateStore:
    """Every group's record in one JSON file (JsonConfigFile: atomic, with a `.bak`)."""

    def __init__(self, path: str) -> None:
        self.file = JsonConfigFile(path)

    def load(self) -> dict[str, GroupRecord]:
        data = self.file.load() or {}
        return {name: GroupRecord.from_json(g) for name, g in data.get("groups", {}).items()}

    def save(self, groups: dict[str, GroupRecord]) -> None:
        self.file.persist({"groups": {name: r.to_json() for name, r in sorted(groups.items())}})


@dataclass(frozen=True)
class GroupSnapshot:
    """A consistent copy of one group for status output."""
    record: GroupRecord
    note: str
    reports: dict[str, tuple[NodeReport, float]]  # node id -> (report, age in seconds)


class ControllerService:
    """Owns the groups' elections, their persistence and the route registry. `_lock` guards
    all three: every input is handled and persisted under it, before its answer leaves. Every
    input first asks `gate` whether this controller is the active one (NotActiveController if
    not)."""

    def __init__(self, store: StateStore, config: ElectionConfig, clock: Clock,
                 gate: ActiveGate = ALWAYS_ACTIVE) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.gate = gate
        self._lock = threading.Lock()
        self._groups: dict[str, GroupElection] = {}
        self._registry = RouteRegistry()
        if gate is ALWAYS_ACTIVE:  # alone: the state is ours from the start
            self.reload()

    def reload(self) -> None:
        """Read every group from the store afresh, as after a restart (on taking over)."""
        with self._lock:
            now = self.clock.monotonic()
            self._groups = {name: GroupElection(record, self.config, now)
                            for name, record in self.store.load().items()}
            self._registry = RouteRegistry()
            for name, group in self._groups.items():
                self._observe_locked(name, group)

    def heartbeat(self, broker_name: str, report: NodeReport) -> Assignment:
        with self._lock:
            self.gate.check_active()
            group = self._groups.get(broker_name)
            if group is None:
                group = self._groups[broker_name] = GroupElection(
                    GroupRecord(broker_name, master_role=self.config.default_master_role),
                    self.config, self.clock.monotonic())
                log.info("new broker group %s (first heard of from %s)", broker_name,
                         report.node_id)
            answer = group.heartbeat(report, self.clock.monotonic(), self.clock.now_ms())
            self._persist_locked()
            self._observe_locked(broker_name, group)
            return dataclasses.replace(
                answer, registered_topics_version=self._registry.registered_version(broker_name),
                route_version=self._registry.version)

    def tick(self) -> None:
        with self._lock:
            try:
                self.gate.check_active()
            except NotActiveController:
                return  # a standby elects nobody
            now, wall = self.clock.monotonic(), self.clock.now_ms()
            for group in self._groups.values():
                group.tick(now, wall)
            try:
                self._persist_locked()
            except NotActiveController:
                return  # stepped down (logged by the gate); nobody waits for this answer
            for name, group in self._groups.items():
                self._observe_locked(name, group)

    def switch_master(self, broker_name: str, node_id: str) -> GroupSnapshot:
        """Raises KeyError for an unknown group, SwitchRefused when the node may not lead."""
        with self._lock:
            self.gate.check_active()
            group = self._groups[broker_name]
            group.switch_master(node_id, self.clock.monotonic(), self.clock.now_ms())
            self._persist_locked()
            self._observe_locked(broker_name, group)
            return self._snapshot_locked(group)

    def register_topics(self, broker_name: str, node_id: str, version: str,
                        endpoints: Iterable[str], topics: Iterable[TopicConfig]) -> str:
        """A master's registration of its group (RouteRegistry.register: KeyError for an
        unknown group, RegistrationRefused from a node that is not its serving master,
        ValueError for bad input); the route's version after it."""
        with self._lock:
            self.gate.check_active()
            group = self._groups[broker_name]
            self._observe_locked(broker_name, group)
            return self._registry.register(broker_name, node_id, version, endpoints, topics)

    def cluster_route(self) -> ClusterRoute:
        with self._lock:
            self.gate.check_active()
            return self._registry.route()

    def snapshots(self) -> list[GroupSnapshot]:
        with self._lock:
            self.gate.check_active()
            return [self._snapshot_locked(g) for _, g in sorted(self._groups.items())]

    # -- internals ------------------------------------------------------------------------------
    def _persist_locked(self) -> None:
        for g in self._groups.values():
            for line in g.announcements:
                log.warning("group %s: %s", g.record.broker_name, line)
            g.announcements.clear()
        dirty = [g for g in self._groups.values() if g.dirty]
        if not dirty:
            return
        try:
            self.store.save({name: g.record for name, g in self._groups.items()})
        except NotActiveController as e:
            # Another controller holds the state now: what we hold is stale, answer nothing.
            self.gate.step_down(str(e), e.active_address)
            self._groups = {}
            self._registry = RouteRegistry()
            raise
        for g in dirty:
            g.dirty = False

    def _observe_locked(self, broker_name: str, group: GroupElection) -> None:
        """The registry takes the election's view of the group."""
        master = group.serving_master()
        address = group.record.addresses.get(master, "") if master else ""
        self._registry.observe(broker_name, master, address,
                               group.note or group.lost_reason, group.addresses())

    def _snapshot_locked(self, group: GroupElection) -> GroupSnapshot:
        now = self.clock.monotonic()
        record = GroupRecord.from_json(group.record.to_json())
        return GroupSnapshot(record, group.note or group.lost_reason or group.kept_note,
                             {n: (s.report, now - s.at) for n, s in group.seen.items()})

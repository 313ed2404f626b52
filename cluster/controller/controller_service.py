"""The controller's state for every broker group, and the one place it changes.

Each group is a GroupElection (election.py: the rules, no I/O). This service feeds it
heartbeats, ticks and switch requests under the group's own lock, and persists every change
of the group before it answers, so an approved sync state set or an election is on disk before
any node acts on it: a controller that restarts never hands out an older epoch or a set that
lost a member it had already dropped.

One lock per group, not one for all: a save waits on the disk or on etcd, and a slow save of
one group (etcd far away or overloaded) must not hold back the heartbeat answers of the others
(a gray failure of the controller's own peer). Groups are independent in the rules, so nothing
is lost by letting them proceed side by side.

Persistence goes through a `StateStore`, one group at a time (`save_group`): `FileStateStore`
keeps every group in one JSON file written atomically (tmp + fsync + rename, the previous
version in `.bak`) for a controller of its own; `EtcdStateStore` (etcd_store.py) keeps each
group under its own etcd key for controllers that share their state.

Several controllers on etcd: only the active one answers (the `ActiveGate`, leadership.py);
a standby holds no groups and refuses with NotActiveController. On taking over, `reload()`
reads every group afresh, the same path as a restart: each group starts its settle window and
counts its nodes alive for a failover timeout, so no master is failed over before its
heartbeats reach the new controller. A save refused by the store (NotActiveController: the
lease is gone) steps the controller down and drops its groups before anything is answered.

The cluster's route (route_registry.py, in memory only) is fed here too: each group's serving
master and node addresses after every heartbeat, tick and switch, and the masters'
registrations; every Assignment carries the registry's version of the group's registration
and of the route. A reload (start, takeover) starts an empty registry.
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
    def save_group(self, name: str, record: GroupRecord) -> None: ...


class FileStateStore:
    """Every group's record in one JSON file (JsonConfigFile: atomic, with a `.bak`). Owns the
    records as last saved (`_saved`, JSON); `_lock` guards them and the file, so two groups
    saving at once each write a file holding both changes."""

    def __init__(self, path: str) -> None:
        self.file = JsonConfigFile(path)
        self._lock = threading.Lock()
        self._saved: dict[str, dict] | None = None  # None: the file not read yet

    def load(self) -> dict[str, GroupRecord]:
        with self._lock:
            self._saved = self._read()
            return {name: GroupRecord.from_json(g) for name, g in self._saved.items()}

    def save_group(self, name: str, record: GroupRecord) -> None:
        with self._lock:
            if self._saved is None:  # a save before any load keeps the other groups' records
                self._saved = self._read()
            self._saved[name] = record.to_json()
            self.file.persist({"groups": dict(sorted(self._saved.items()))})

    def _read(self) -> dict[str, dict]:
        return dict((self.file.load() or {}).get("groups", {}))


@dataclass(frozen=True)
class GroupSnapshot:
    """A consistent copy of one group for status output."""
    record: GroupRecord
    note: str
    reports: dict[str, tuple[NodeReport, float]]  # node id -> (report, age in seconds)


class _Group:
    """One group's election and the lock its inputs and its saves take."""

    __slots__ = ("name", "election", "lock")

    def __init__(self, name: str, election: GroupElection) -> None:
        self.name = name
        self.election = election
        self.lock = threading.Lock()


class ControllerService:
    """Owns the groups' elections, their persistence and the route registry.

    Locks: each group's `lock` guards its election and is held while the group's change is
    persisted, before its answer leaves; `_lock` guards the set of groups (`_groups`) and the
    registry, and is only held briefly (never around I/O). Order: a group's lock, then `_lock`;
    never the other way. Every input first asks `gate` whether this controller is the active
    one (NotActiveController if not)."""

    def __init__(self, store: StateStore, config: ElectionConfig, clock: Clock,
                 gate: ActiveGate = ALWAYS_ACTIVE) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.gate = gate
        self._lock = threading.Lock()
        self._groups: dict[str, _Group] = {}
        self._registry = RouteRegistry()
        if gate is ALWAYS_ACTIVE:  # alone: the state is ours from the start
            self.reload()

    def reload(self) -> None:
        """Read every group from the store afresh, as after a restart (on taking over)."""
        records = self.store.load()
        now = self.clock.monotonic()
        groups = {name: _Group(name, GroupElection(record, self.config, now))
                  for name, record in records.items()}
        with self._lock:
            self._groups = groups
            self._registry = RouteRegistry()
            for g in groups.values():
                self._observe_locked(g)

    def heartbeat(self, broker_name: str, report: NodeReport) -> Assignment:
        self.gate.check_active()
        g = self._group(broker_name, report.node_id)
        with g.lock:
            answer = g.election.heartbeat(report, self.clock.monotonic(), self.clock.now_ms())
            self._persist(g)
            with self._lock:
                if not self._observe_locked(g):
                    raise NotActiveController("", "stepped down while answering")
                return dataclasses.replace(
                    answer,
                    registered_topics_version=self._registry.registered_version(broker_name),
                    route_version=self._registry.version)

    def tick(self) -> None:
        try:
            self.gate.check_active()
        except NotActiveController:
            return  # a standby elects nobody
        for g in self._all():
            with g.lock:
                g.election.tick(self.clock.monotonic(), self.clock.now_ms())
                try:
                    self._persist(g)
                except NotActiveController:
                    return  # stepped down (logged by the gate); nobody waits for this answer
                with self._lock:
                    self._observe_locked(g)

    def switch_master(self, broker_name: str, node_id: str) -> GroupSnapshot:
        """Raises KeyError for an unknown group, SwitchRefused when the node may not lead."""
        self.gate.check_active()
        g = self._known(broker_name)
        with g.lock:
            g.election.switch_master(node_id, self.clock.monotonic(), self.clock.now_ms())
            self._persist(g)
            with self._lock:
                self._observe_locked(g)
            return self._snapshot(g)

    def register_topics(self, broker_name: str, node_id: str, version: str,
                        endpoints: Iterable[str], topics: Iterable[TopicConfig]) -> str:
        """A master's registration of its group (RouteRegistry.register: KeyError for an
        unknown group, RegistrationRefused from a node that is not its serving master,
        ValueError for bad input); the route's version after it."""
        self.gate.check_active()
        g = self._known(broker_name)
        with g.lock, self._lock:
            self._observe_locked(g)
            return self._registry.register(broker_name, node_id, version, endpoints, topics)

    def cluster_route(self) -> ClusterRoute:
        self.gate.check_active()
        with self._lock:
            return self._registry.route()

    def snapshots(self) -> list[GroupSnapshot]:
        self.gate.check_active()
        out = []
        for g in sorted(self._all(), key=lambda g: g.name):
            with g.lock:
                out.append(self._snapshot(g))
        return out

    # -- internals ------------------------------------------------------------------------------
    def _group(self, broker_name: str, node_id: str) -> _Group:
        """The group, created at the first heartbeat of one of its nodes."""
        with self._lock:
            g = self._groups.get(broker_name)
            if g is None:
                g = self._groups[broker_name] = _Group(broker_name, GroupElection(
                    GroupRecord(broker_name, master_role=self.config.default_master_role),
                    self.config, self.clock.monotonic()))
                log.info("new broker group %s (first heard of from %s)", broker_name, node_id)
            return g

    def _known(self, broker_name: str) -> _Group:
        with self._lock:
            return self._groups[broker_name]

    def _all(self) -> list[_Group]:
        with self._lock:
            return list(self._groups.values())

    def _persist(self, g: _Group) -> None:
        """Save the group's record if it changed (under the group's lock, not `_lock`)."""
        election = g.election
        for line in election.announcements:
            log.warning("group %s: %s", g.name, line)
        election.announcements.clear()
        if not election.dirty:
            return
        try:
            self.store.save_group(g.name, election.record)
        except NotActiveController as e:
            # Another controller holds the state now: what we hold is stale, answer nothing.
            self.gate.step_down(str(e), e.active_address)
            with self._lock:
                self._groups = {}
                self._registry = RouteRegistry()
            raise
        election.dirty = False

    def _observe_locked(self, g: _Group) -> bool:
        """The registry takes the election's view of the group (under its lock and `_lock`).
        False for a group dropped meanwhile (this controller stepped down): not observed."""
        if self._groups.get(g.name) is not g:
            return False
        election = g.election
        master = election.serving_master()
        address = election.record.addresses.get(master, "") if master else ""
        self._registry.observe(g.name, master, address,
                               election.note or election.lost_reason, election.addresses())
        return True

    def _snapshot(self, g: _Group) -> GroupSnapshot:
        election = g.election
        now = self.clock.monotonic()
        record = GroupRecord.from_json(election.record.to_json())
        return GroupSnapshot(record, election.note or election.lost_reason or election.kept_note,
                             {n: (s.report, now - s.at) for n, s in election.seen.items()})

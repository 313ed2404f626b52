"""The controller's rules for one broker group, without I/O: who is master, in which epoch, who
may be elected. Fed heartbeats and ticks (with the time), it answers Assignments and records
elections; the controller service persists the record whenever `dirty` is set, before it
answers.

Terms
- The **sync state set** (E) is the set of nodes that hold every acknowledged write. The master
  reports the slaves it finds in sync; E becomes {master} + that report. The master waits for
  the ack of every member of E (and of slaves that joined since) before it acknowledges a write,
  and drops a member only after E no longer holds it (master/master_role.py, ha/ack_tracker.py),
  so an elected member of E has every acknowledged write. With the report comes why each slave
  last left or joined the master's in-sync set (slow, lagging, disconnected, caught up); each
  change of E is logged once with it and kept (`sync_state_changes`, the newest first).
- A SYNC_MASTER's E is not shrunk below its minInSyncReplicas: when the report would leave
  fewer, E keeps its members (the master refuses writes while too few are in sync, so the kept
  members miss no acknowledged write, and stay electable); `kept_note` says so.
- A node is **alive** while its last heartbeat is younger than `failover_timeout_ms`; nodes not
  heard from since the controller started count as alive for that long after the start (a
  restarted controller does not fail over a master it simply has not heard from yet). The same
  grace follows a stall of the controller itself (a gap of more than half the timeout between
  two ticks: paused, or starved of CPU): everyone's silence was the controller's.

Election, when the master is lost (no heartbeat for failover_timeout_ms; unhealthy, i.e. its
store not writable, for as long; or out of its term: it reports a role other than master with
an epoch at least the group's, as after a restart, so it cannot take that epoch again):
1. Candidates: the alive, healthy members of E, the lost master excluded unless it restarted.
   A fresh group (no master ever) takes every alive, healthy node.
2. Wait while the settle window runs (`settle_ms` after the controller started or the group was
   first heard of) and not every member of E has reported, so a node with more data that is
   still starting is not passed over. A fresh group whose reports all have epoch 0 (empty
   stores) does not wait.
3. The winner: highest epoch, then highest max offset, then (a fresh group) a node configured
   as master, then the lowest priority, then the node id. The new epoch is one more than
   any epoch the group or its nodes have seen; E becomes {winner}.
4. No candidate: nobody is elected and the note says why (the master stays assigned: should it
   come back, alive and healthy, it carries on; until then writes fail). With `unclean` every
   alive, healthy node is a candidate (acknowledged writes may be lost).

A planned switch (`switch_master`) promotes an alive, healthy member of E the same way.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from store.broker_role import BrokerRole

from cluster.controller.node_load import NodeLoad

TRANSITIONING = "TRANSITIONING"
MAX_ELECTIONS_KEPT = 20
MAX_SYNC_STATE_CHANGES_KEPT = 20
_MASTER_ROLES = (BrokerRole.ASYNC_MASTER.value, BrokerRole.SYNC_MASTER.value)


class SwitchRefused(Exception):
    """A planned switch that cannot be made (the reason says why); nothing changed."""


@dataclass(frozen=True)
class ElectionConfig:
    """The election rules' knobs (the module docstring): the failover timeout, the master's
    lease (shorter), the settle window, whether unclean elections are allowed, and a new
    group's master role."""

    failover_timeout_ms: int = 3000
    lease_ms: int = 2000  # < failover_timeout_ms: an unheard master stops before a new one starts
    settle_ms: int = 3000
    unclean: bool = False
    default_master_role: BrokerRole = BrokerRole.SYNC_MASTER

    def __post_init__(self) -> None:
        if not 0 < self.lease_ms < self.failover_timeout_ms:
            raise ValueError(f"the lease ({self.lease_ms} ms) must be positive and shorter than "
                             f"the failover timeout ({self.failover_timeout_ms} ms)")
        if self.settle_ms < 0:
            raise ValueError(f"settle_ms must be >= 0, got {self.settle_ms}")
        if not self.default_master_role.is_master:
            raise ValueError("default_master_role must be a master role")


@dataclass(frozen=True)
class NodeReport:
    """One heartbeat of a node (see proto/controller.proto NodeHeartbeat)."""
    node_id: str
    address: str
    role: str  # a BrokerRole name or TRANSITIONING
    epoch: int = 0
    max_offset: int = 0
    healthy: bool = True
    unhealthy_reason: str = ""
    in_sync: frozenset[str] = frozenset()
    priority: int = 0
    preferred_role: str = ""
    member_notes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    min_in_sync_replicas: int = 0  # a master's; 0: not reported
    load: NodeLoad | None = None  # None: a node that does not report its load
    route_version: str = ""  # the cluster route version the node holds ("" none yet)

    @property
    def is_master(self) -> bool:
        return self.role in (BrokerRole.ASYNC_MASTER, BrokerRole.SYNC_MASTER)


@dataclass(frozen=True)
class Assignment:
    """The controller's answer to one heartbeat: the role the node takes (None: wait, no
    master), its master, the epoch, the sync state set and its epoch, a note, how long
    a master's lease lasts, the advertised addresses of the group's nodes, and the route
    registry's versions of the group's registration and of the cluster's route."""

    role: BrokerRole | None  # None: wait (no master)
    master_address: str = ""
    master_id: str = ""
    epoch: int = 0
    sync_state_set: frozenset[str] = frozenset()
    sync_state_epoch: int = 0
    note: str = ""
    lease_ms: int = 0
    group_addresses: tuple[str, ...] = ()
    # the route registry's (route_registry.py), added by the controller service
    registered_topics_version: str = ""
    route_version: str = ""


@dataclass(frozen=True)
class ElectionRecord:
    at_ms: int
    epoch: int
    master_id: str
    previous_master_id: str
    reason: str


@dataclass(frozen=True)
class SyncStateChange:
    """One member added to or removed from the sync state set, and why."""
    at_ms: int
    sync_state_epoch: int  # after the change
    node_id: str
    added: bool
    reason: str


@dataclass
class GroupRecord:
    """What the controller persists of a group."""
    broker_name: str
    epoch: int = 0
    master_id: str = ""
    sync_state_set: frozenset[str] = frozenset()
    sync_state_epoch: int = 0
    master_role: BrokerRole = BrokerRole.SYNC_MASTER
    addresses: dict[str, str] = field(default_factory=dict)
    elections: list[ElectionRecord] = field(default_factory=list)
    sync_state_changes: list[SyncStateChange] = field(default_factory=list)  # newest first

    def to_json(self) -> dict[str, Any]:
        return {"broker_name": self.broker_name, "epoch": self.epoch,
                "master_id": self.master_id, "sync_state_set": sorted(self.sync_state_set),
                "sync_state_epoch": self.sync_state_epoch, "master_role": self.master_role.value,
                "addresses": dict(sorted(self.addresses.items())),
                "elections": [dataclasses.asdict(e) for e in self.elections],
                "sync_state_changes": [dataclasses.asdict(c) for c in self.sync_state_changes]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "GroupRecord":
        return cls(broker_name=str(data["broker_name"]), epoch=int(data["epoch"]),
                   master_id=str(data["master_id"]),
                   sync_state_set=frozenset(map(str, data["sync_state_set"])),
                   sync_state_epoch=int(data["sync_state_epoch"]),
                   master_role=BrokerRole.parse(data["master_role"]),
                   addresses={str(k): str(v) for k, v in data["addresses"].items()},
                   elections=[ElectionRecord(**e) for e in data.get("elections", [])],
                   sync_state_changes=[SyncStateChange(**c)
                                       for c in data.get("sync_state_changes", [])])


@dataclass
class _Seen:
    report: NodeReport
    at: float  # monotonic seconds
    unhealthy_since: float | None = None


class GroupElection:
    """Owns one group's record and the latest report of each of its nodes. Not thread-safe:
    the controller service calls it under its lock."""

    def __init__(self, record: GroupRecord, config: ElectionConfig, now: float) -> None:
        self.record = record
        self.config = config
        self.started_at = now
        self.resumed_at = now  # the controller's last start or stall: silence before is ours
        self.last_tick = now
        self.seen: dict[str, _Seen] = {}
        self.lost_reason = ""  # set when the master is lost and an election is due
        self.master_may_run = False  # the lost master restarted: it is a candidate again
        self.note = ""
        self.kept_note = ""  # why E keeps members the master no longer finds in sync
        self.dirty = False  # the record changed: persist it before answering
        self.announcements: list[str] = []  # what changed, for the controller's log

    # -- inputs -------------------------------------------------------------------------------
    def heartbeat(self, report: NodeReport, now: float, wall_ms: int) -> Assignment:
        rec = self.record
        previous = self.seen.get(report.node_id)
        unhealthy_since = None
        if not report.healthy:
            unhealthy_since = previous.unhealthy_since if previous and previous.unhealthy_since \
                is not None else now
        self.seen[report.node_id] = _Seen(report, now, unhealthy_since)
        if rec.addresses.get(report.node_id) != report.address:
            rec.addresses[report.node_id] = report.address
            self.dirty = True
        if report.node_id == rec.master_id:
            self._from_master(report, wall_ms)
        self.tick(now, wall_ms)
        return self.assignment(report.node_id)

    def tick(self, now: float, wall_ms: int) -> None:
        """Detect a lost master (or one that came back before anyone was elected) and elect
        when due."""
        rec = self.record
        if now - self.last_tick > self.config.failover_timeout_ms / 2000.0:
            self.resumed_at = now  # the controller stalled: do not blame the nodes
        self.last_tick = now
        if rec.master_id and not self.master_may_run:
            self.lost_reason = self._loss(rec.master_id, now)
            if not self.lost_reason:
                self.note = ""
        if not rec.master_id or self.lost_reason:
            self._elect(now, wall_ms)

    def switch_master(self, node_id: str, now: float, wall_ms: int) -> None:
        rec = self.record
        if node_id == rec.master_id and not self.lost_reason:
            raise SwitchRefused(f"{node_id} is the master already (epoch {rec.epoch})")
        if node_id not in rec.sync_state_set:
            raise SwitchRefused(f"{node_id} is not in the sync state set "
                                f"{sorted(rec.sync_state_set)}: it may miss acknowledged writes")
        seen = self.seen.get(node_id)
        if seen is None or not self._alive(node_id, now):
            raise SwitchRefused(f"{node_id} has not sent a heartbeat within "
                                f"{self.config.failover_timeout_ms} ms")
        if not seen.report.healthy:
            raise SwitchRefused(f"{node_id} is unhealthy: {seen.report.unhealthy_reason}")
        self._make_master(node_id, wall_ms, f"planned switch to {node_id}")

    # -- outputs ------------------------------------------------------------------------------
    def assignment(self, node_id: str) -> Assignment:
        rec = self.record
        common = dict(master_id=rec.master_id, epoch=rec.epoch, note=self.note,
                      sync_state_set=rec.sync_state_set, sync_state_epoch=rec.sync_state_epoch,
                      group_addresses=self.addresses())
        if not rec.master_id or (node_id == rec.master_id and self.master_may_run):
            return Assignment(None, **common)  # wait: no master, or it must rejoin the election
        if node_id == rec.master_id:
            return Assignment(rec.master_role, lease_ms=self.config.lease_ms, **common)
        return Assignment(BrokerRole.SLAVE, master_address=rec.addresses.get(rec.master_id, ""),
                          **common)

    def addresses(self) -> tuple[str, ...]:
        """The advertised address of every node of the group heard of, sorted."""
        return tuple(sorted({a for a in self.record.addresses.values() if a}))

    def serving_master(self) -> str:
        """The master the group has now; "" while it has none (never elected, lost and not
        replaced, or out of its term and not elected again)."""
        rec = self.record
        if not rec.master_id or self.lost_reason or self.master_may_run:
            return ""
        return rec.master_id

    def alive_ids(self, now: float) -> list[str]:
        return sorted(n for n in self.seen if self._alive(n, now))

    # -- internals ----------------------------------------------------------------------------
    def _from_master(self, report: NodeReport, wall_ms: int) -> None:
        rec = self.record
        if self.master_may_run:
            return  # it left its term: a late report of that term must not widen the set
        if report.is_master and report.epoch == rec.epoch:
            wanted = self._kept(frozenset({rec.master_id}) | report.in_sync, report)
            if wanted != rec.sync_state_set:
                self._change_set(wanted, report, wall_ms)
        elif not report.is_master and report.epoch >= rec.epoch:
            # Out of its term (restarted, or demoted by hand): it cannot take this epoch again.
            self.lost_reason = f"master {rec.master_id} is out of its term (reports " \
                               f"{report.role} in epoch {report.epoch})"
            self.master_may_run = True

    def _kept(self, reported: frozenset[str], report: NodeReport) -> frozenset[str]:
        """The set to take from the master's report: what it reports, or, for a SYNC_MASTER
        whose report has fewer than its minInSyncReplicas, that plus the members it dropped
        (see the module docstring), noted once per kept set."""
        rec = self.record
        minimum = report.min_in_sync_replicas
        kept = rec.sync_state_set - reported
        if report.role != BrokerRole.SYNC_MASTER.value or len(reported) >= minimum or not kept:
            self.kept_note = ""
            return reported
        note = (f"keeps {', '.join(sorted(kept))} in the sync state set: without "
                f"{'it' if len(kept) == 1 else 'them'} {len(reported)} < minInSyncReplicas="
                f"{minimum}, so the master refuses writes ("
                + "; ".join(f"{n} {report.member_notes.get(n, 'not in sync')}"
                            for n in sorted(kept)) + ")")
        if note != self.kept_note:
            self.announcements.append(note)
            self.kept_note = note
        return reported | kept

    def _change_set(self, wanted: frozenset[str], report: NodeReport, wall_ms: int) -> None:
        """E becomes `wanted`: each member added or removed is logged once and recorded with
        what the master said of it."""
        rec = self.record
        old = rec.sync_state_set
        rec.sync_state_set = wanted
        rec.sync_state_epoch += 1
        self.dirty = True
        changes = [SyncStateChange(wall_ms, rec.sync_state_epoch, n, n in wanted,
                                   report.member_notes.get(n, "") or
                                   ("in sync" if n in wanted else "no longer in sync"))
                   for n in sorted(old ^ wanted)]
        rec.sync_state_changes[:0] = changes
        del rec.sync_state_changes[MAX_SYNC_STATE_CHANGES_KEPT:]
        self.announcements.append(
            f"sync state set {sorted(old)} -> {sorted(wanted)}: "
            + "; ".join(f"{'added' if c.added else 'removed'} {c.node_id} ({c.reason})"
                        for c in changes))

    def _alive(self, node_id: str, now: float) -> bool:
        seen = self.seen.get(node_id)
        last = max(seen.at if seen is not None else self.started_at, self.resumed_at)
        return now - last < self.config.failover_timeout_ms / 1000.0

    def _loss(self, master_id: str, now: float) -> str:
        timeout = self.config.failover_timeout_ms / 1000.0
        if not self._alive(master_id, now):
            return f"no heartbeat from master {master_id} for {self.config.failover_timeout_ms} ms"
        seen = self.seen.get(master_id)
        if seen is not None and seen.unhealthy_since is not None \
                and now - seen.unhealthy_since >= timeout:
            return f"master {master_id} unhealthy for {self.config.failover_timeout_ms} ms: " \
                   f"{seen.report.unhealthy_reason}"
        return ""

    def _candidates(self, now: float) -> list[NodeReport]:
        rec = self.record
        fresh = not rec.sync_state_set
        pool = set(self.seen) if fresh or self.config.unclean else set(rec.sync_state_set)
        if rec.master_id and not self.master_may_run:
            pool.discard(rec.master_id)
        return [self.seen[n].report for n in sorted(pool)
                if n in self.seen and self._alive(n, now) and self.seen[n].report.healthy]

    def _settling(self, now: float, candidates: list[NodeReport]) -> bool:
        rec = self.record
        if now - self.started_at >= self.config.settle_ms / 1000.0:
            return False
        if not rec.sync_state_set:  # a fresh group: wait unless every store is empty
            return any(r.epoch > 0 for r in candidates) or not candidates
        missing = [n for n in rec.sync_state_set if n not in self.seen]
        return bool(missing)

    def _elect(self, now: float, wall_ms: int) -> None:
        candidates = self._candidates(now)
        if self._settling(now, candidates):
            self.note = "waiting for the nodes of the group to report before electing"
            return
        if not candidates:
            members = ", ".join(sorted(self.record.sync_state_set)) or "none"
            why = self.lost_reason or "no master yet"
            note = (f"{why}; no alive, healthy node of the sync state set ({members}) to elect: "
                    f"the group refuses writes (unclean election is off)")
            if note != self.note:
                self.note = note
                self.announcements.append(note)
            return
        fresh = not self.record.sync_state_set

        def rank(r: NodeReport):
            preferred = 0 if fresh and r.preferred_role in _MASTER_ROLES else 1
            return (-r.epoch, -r.max_offset, preferred, r.priority, r.node_id)
        winner = min(candidates, key=rank)
        if fresh:
            self.record.master_role = (BrokerRole.parse(winner.preferred_role)
                                       if winner.preferred_role in _MASTER_ROLES
                                       else self.config.default_master_role)
        self._make_master(winner.node_id, wall_ms, self.lost_reason or "first election")

    def _make_master(self, node_id: str, wall_ms: int, reason: str) -> None:
        rec = self.record
        seen_epochs = [s.report.epoch for s in self.seen.values()]
        new_epoch = max([rec.epoch, *seen_epochs]) + 1
        rec.elections.insert(0, ElectionRecord(wall_ms, new_epoch, node_id, rec.master_id, reason))
        self.announcements.append(f"elected {node_id} master in epoch {new_epoch} "
                                  f"(was {rec.master_id or 'none'}): {reason}")
        del rec.elections[MAX_ELECTIONS_KEPT:]
        rec.master_id = node_id
        rec.epoch = new_epoch
        rec.sync_state_set = frozenset({node_id})
        rec.sync_state_epoch += 1
        self.master_may_run = False
        self.lost_reason = ""
        self.note = ""
        self.dirty = True

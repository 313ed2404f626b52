"""The console's view over time: produce and consume rates and consumer lag of each broker
group over the last 15 minutes, and what needs attention now. Plain objects; the sampler is a
`Service` whose `step()` tests call with a ManualClock.

Where the figures come from: every node's heartbeat carries its load (proto/controller.proto
NodeLoad: counters since its process started, a master's consumer lag per consumer group, disk
usage), and the controller keeps each node's last one. The controller's `TrendSampler` reads
them every `interval_s` (5 s) into a ring of `window_s / interval_s` samples per group (180):
sampling there, not on the nodes, keeps a group's history across a failover (the killed
master's memory goes with it) and covers every group the controller knows, keyed by broker
name, with no extra call to any node.

A sample's rates come from counters: per node, the increase since the node's previous report
over the time between the two reports (when they were received), summed over the group's nodes
(a send is counted once, by the master that stored it; a receive by the master that handed it
out; a pull by the replica that answered it, so a failover between two samples counts both
masters' parts). A counter that went down, or a new process start, is a restart: the increase
is then the counter's value (it counted from 0 since), never a negative rate. A node seen for
the first time has no rate yet (None). A group's lag is its master's: the sum over its consumer
groups, kept per consumer group too; None while the master does not know it (loading its
consumer state after a failover).

Highlights (`highlights`): each a level ("critical" or "warning"), a kind, the group, the node or
consumer group concerned, and a reason:

    no_master        critical  the group has no master (the controller's note says why)
    silent           critical for the master, warning for a slave: no heartbeat for longer
                               than the failover timeout (or none since the controller started)
    unhealthy        critical  the node's store is not writable (its reason)
    out_of_sync_set  warning   a live slave outside the sync state set: it cannot be elected
                               (why it last left, as the master said)
    out_of_sync      warning   a member of the sync state set the master finds out of sync now
                               (the master's note; the controller drops it soon)
    disk             critical at diskSpaceWarningLevelRatio and above (writes refused),
                     warning at diskMaxUsedSpaceRatio and above (retention deletes early)
    lag_growing      warning   a consumer group's lag rose from each sample to the next over
                               the last `growing_samples` samples (5: four rises in a row,
                               20 s at 5 s a sample), all with a known lag, by GROWING_MIN_RISE
                               (100) messages or more in all: the lag of a group that keeps
                               up wobbles by a batch or two and is not flagged by chance
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from common.clock import Clock
from common.service import Service

from cluster.controller.active_gate import NotActiveController
from cluster.controller.controller_service import ControllerService, GroupSnapshot
from cluster.controller.node_load import NodeLoad

INTERVAL_S = 5.0
WINDOW_S = 900.0  # 15 minutes
GROWING_SAMPLES = 5
GROWING_MIN_RISE = 100
CRITICAL, WARNING = "critical", "warning"


@dataclass(frozen=True)
class NodeReading:
    """One node's load as last reported, and when that report arrived (monotonic seconds)."""
    node_id: str
    at: float
    load: NodeLoad


@dataclass(frozen=True)
class GroupReading:
    """What a sampler reads of one broker group: its master now and its nodes' loads."""
    group: str
    master_id: str
    nodes: tuple[NodeReading, ...]


@dataclass(frozen=True)
class Sample:
    """One point of a group's series. Rates in messages per second; None: unknown."""
    at_ms: int
    master_id: str
    produce: float | None
    consume: float | None
    lag: Mapping[str, int] | None  # per consumer group; None: unknown

    @property
    def total_lag(self) -> int | None:
        return None if self.lag is None else sum(self.lag.values())


@dataclass(frozen=True)
class Highlight:
    """Something that needs attention (the module docstring lists the kinds)."""
    level: str
    kind: str
    group: str
    reason: str
    node: str = ""
    consumer_group: str = ""


class CounterRates:
    """Rates of counters that restart at 0 with their process. Keyed by (node, counter);
    remembers each key's last (process start, value, time)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[int, int, float]] = {}

    def rate(self, key: tuple[str, str], started_ms: int, value: int,
             at: float) -> float | None:
        """Per second since the key's previous read; None the first time, or when no time
        passed (the same report read again: a silent node tells nothing new)."""
        if value < 0:
            raise ValueError(f"counter {key} is negative: {value}")
        previous = self._last.get(key)
        self._last[key] = (started_ms, value, at)
        if previous is None:
            return None
        p_started, p_value, p_at = previous
        if at <= p_at:
            return None
        restarted = started_ms != p_started or value < p_value
        return (value if restarted else value - p_value) / (at - p_at)

    def forget_except(self, keys: Iterable[tuple[str, str]]) -> None:
        """Drop the keys not in `keys` (nodes no longer reported)."""
        keep = set(keys)
        for key in [k for k in self._last if k not in keep]:
            del self._last[key]


def _sum_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


class TrendSampler(Service):
    """Reads `source` every `interval_s` and appends one Sample per group to that group's
    ring (the newest `window_s / interval_s`). `_lock` guards the rings and the counters'
    memory: step() runs on the service's thread (or a test's), `series()` on the HTTP
    server's threads."""
    name = "console-trends"

    def __init__(self, source: Callable[[], list[GroupReading]], clock: Clock,
                 interval_s: float = INTERVAL_S, window_s: float = WINDOW_S) -> None:
        super().__init__()
        if not 0 < interval_s <= window_s:
            raise ValueError(f"want 0 < interval_s ({interval_s}) <= window_s ({window_s})")
        self.source = source
        self.clock = clock
        self.interval_s = interval_s
        self.window_s = window_s
        self.capacity = max(1, int(window_s // interval_s))
        self._lock = threading.Lock()
        self._rings: dict[str, deque[Sample]] = {}
        self._rates = CounterRates()

    def wait_interval(self) -> float:
        return self.interval_s

    def step(self) -> None:
        readings = self.source()
        at_ms = self.clock.now_ms()
        with self._lock:
            for g in readings:
                ring = self._rings.get(g.group)
                if ring is None:
                    ring = self._rings[g.group] = deque(maxlen=self.capacity)
                ring.append(self._sample_locked(g, at_ms))
            self._rates.forget_except((g.group + "/" + n.node_id, counter)
                                      for g in readings for n in g.nodes
                                      for counter in ("sent", "delivered"))

    def _sample_locked(self, g: GroupReading, at_ms: int) -> Sample:
        produce, consume = [], []
        lag: Mapping[str, int] | None = None
        for n in g.nodes:
            key, load = g.group + "/" + n.node_id, n.load
            produce.append(self._rates.rate((key, "sent"), load.started_ms,
                                            load.sent_messages, n.at))
            consume.append(self._rates.rate((key, "delivered"), load.started_ms,
                                            load.delivered_messages, n.at))
            if n.node_id == g.master_id:
                lag = load.consumer_lag
        return Sample(at_ms, g.master_id, _sum_known(produce), _sum_known(consume),
                      None if lag is None else dict(lag))

    def series(self) -> dict[str, list[Sample]]:
        """Every group's samples, the oldest first."""
        with self._lock:
            return {name: list(ring) for name, ring in sorted(self._rings.items())}


# -- readings ---------------------------------------------------------------------------------
def controller_readings(service: ControllerService, clock: Clock
                        ) -> Callable[[], list[GroupReading]]:
    """A sampler's source on a controller: its groups, none while it is a standby."""
    def read() -> list[GroupReading]:
        try:
            snapshots = service.snapshots()
        except NotActiveController:
            return []
        return readings_of(snapshots, clock.monotonic())
    return read


def readings_of(snapshots: Iterable[GroupSnapshot], now: float) -> list[GroupReading]:
    """The controller's groups as readings: each node's last load, received `age` seconds
    before `now` (monotonic)."""
    out = []
    for s in snapshots:
        nodes = tuple(NodeReading(node_id, now - age, report.load)
                      for node_id, (report, age) in sorted(s.reports.items())
                      if report.load is not None)
        out.append(GroupReading(s.record.broker_name, s.record.master_id, nodes))
    return out


# -- highlights -------------------------------------------------------------------------------
def highlights(snapshots: Iterable[GroupSnapshot], series: Mapping[str, list[Sample]],
               silent_after_s: float, growing_samples: int = GROWING_SAMPLES) -> list[Highlight]:
    """What needs attention now, the critical first: each group's state as the controller
    has it, its nodes' last loads, and its lag series."""
    out: list[Highlight] = []
    for s in snapshots:
        out += group_highlights(s, silent_after_s)
        for node_id, (report, _) in sorted(s.reports.items()):
            if report.load is not None:
                out += disk_highlights(s.record.broker_name, node_id, report.load)
    for group, samples in series.items():
        out += lag_highlights(group, samples, growing_samples)
    return sorted(out, key=lambda h: h.level != CRITICAL)


def group_highlights(s: GroupSnapshot, silent_after_s: float) -> list[Highlight]:
    """A group without a master, silent or unhealthy nodes, slaves outside the sync state set
    or out of sync with the master."""
    rec, group = s.record, s.record.broker_name
    out: list[Highlight] = []
    if not rec.master_id:
        out.append(Highlight(CRITICAL, "no_master", group, s.note or "no master elected yet"))
    master = s.reports.get(rec.master_id)
    master_report = master[0] if master is not None and master[0].is_master else None
    for node_id in sorted(set(rec.addresses) | set(s.reports)):
        is_master = node_id == rec.master_id
        seen = s.reports.get(node_id)
        if seen is None:
            out.append(Highlight(CRITICAL if is_master else WARNING, "silent", group,
                                 "not heard from since the controller started", node_id))
            continue
        report, age = seen
        if age > silent_after_s:
            out.append(Highlight(CRITICAL if is_master else WARNING, "silent", group,
                                 f"no heartbeat for {age:.0f} s", node_id))
        if not report.healthy:
            out.append(Highlight(CRITICAL, "unhealthy", group,
                                 report.unhealthy_reason or "its store is not writable", node_id))
        if is_master or not rec.master_id:
            continue
        if node_id not in rec.sync_state_set:
            out.append(Highlight(WARNING, "out_of_sync_set", group,
                                 _left_reason(s, node_id), node_id))
        elif master_report is not None and node_id not in master_report.in_sync:
            note = master_report.member_notes.get(node_id, "")
            out.append(Highlight(WARNING, "out_of_sync", group,
                                 "the master finds it out of sync" + (f": {note}" if note
                                                                       else ""), node_id))
    return out


def _left_reason(s: GroupSnapshot, node_id: str) -> str:
    for change in s.record.sync_state_changes:  # the newest first
        if change.node_id == node_id:
            if not change.added:
                return f"out of the sync state set: {change.reason}"
            break
    return "not in the sync state set: it cannot be elected"


def disk_highlights(group: str, node_id: str, load: NodeLoad) -> list[Highlight]:
    used = load.disk_used_ratio
    if used < 0:
        return []
    if load.disk_warning_ratio and used >= load.disk_warning_ratio:
        return [Highlight(CRITICAL, "disk", group, f"disk {used:.0%} used, at or above "
                          f"diskSpaceWarningLevelRatio {load.disk_warning_ratio:.0%}: writes "
                          f"refused", node_id)]
    if load.disk_max_used_ratio and used >= load.disk_max_used_ratio:
        return [Highlight(WARNING, "disk", group, f"disk {used:.0%} used, at or above "
                          f"diskMaxUsedSpaceRatio {load.disk_max_used_ratio:.0%}: retention "
                          f"deletes files before they expire", node_id)]
    return []


def lag_highlights(group: str, samples: list[Sample], n: int = GROWING_SAMPLES,
                   min_rise: int = GROWING_MIN_RISE) -> list[Highlight]:
    """Consumer groups whose lag rose from each sample to the next over the last `n`
    samples (every one of them with a known lag for that consumer group), by `min_rise`
    messages or more from the first to the last."""
    if n < 2:
        raise ValueError(f"growing_samples must be >= 2, got {n}")
    last = samples[-n:]
    if len(last) < n or any(s.lag is None for s in last):
        return []
    out = []
    for cg in sorted(last[-1].lag or {}):
        lags = [(s.lag or {}).get(cg) for s in last]
        if None in lags:
            continue
        if all(b > a for a, b in zip(lags, lags[1:])) and lags[-1] - lags[0] >= min_rise:
            seconds = (last[-1].at_ms - last[0].at_ms) / 1000
            rate = (lags[-1] - lags[0]) / seconds if seconds > 0 else 0.0
            out.append(Highlight(WARNING, "lag_growing", group,
                                 f"lag rose {n - 1} times in a row over {seconds:.0f} s: "
                                 f"{lags[0]} -> {lags[-1]} (+{rate:.1f}/s)",
                                 consumer_group=cg))
    return out


# -- the API's answer -------------------------------------------------------------------------
def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def series_json(group: str, samples: list[Sample]) -> dict:
    """One group's series, column by column (the module console_api's docstring)."""
    names = sorted({cg for s in samples if s.lag is not None for cg in s.lag})
    masters: list[list] = []
    for s in samples:
        if not masters or masters[-1][1] != s.master_id:
            masters.append([s.at_ms, s.master_id])
    return {"group": group, "at_ms": [s.at_ms for s in samples],
            "produce_per_s": [_round(s.produce) for s in samples],
            "consume_per_s": [_round(s.consume) for s in samples],
            "lag": [s.total_lag for s in samples],
            "consumer_lag": {cg: [None if s.lag is None else s.lag.get(cg) for s in samples]
                             for cg in names},
            "masters": masters}


def highlight_json(h: Highlight) -> dict:
    return {"level": h.level, "kind": h.kind, "group": h.group, "node": h.node,
            "consumer_group": h.consumer_group, "reason": h.reason}

"""What a fault did to the producers, as the gray-failure drills report it (issue 49): the write
rate and the send latency before, during and after each fault, from the History's sends.

Windows of a fault that started at S and was healed at H (`grace` is the time the cluster is
given to notice and act: the issue's "within 5 s"):

    before     [S - before_s, S)      (from the first send, when the load started later)
    detecting  [S, S + grace)         the cluster notices (not judged)
    during     [S + grace, H)         the fault goes on, handled
    after      [H, end)               end: the next fault's start, or the last send

`rate` is the acknowledged sends that *finished* in a window, per second of it; `p99_ms` the
99th percentile latency (nearest rank) of the acknowledged sends that *started* in it;
`not_ok` the sends started in it that were not acknowledged (refused, timed out). A drill may
require `during.rate >= min_ratio * before.rate` (the slow-slave drills' target).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from cluster.drills.history import Fault, Send, SendOutcome

BEFORE, DETECTING, DURING, AFTER = "before", "detecting", "during", "after"


@dataclass(frozen=True)
class Phase:
    """One window of a fault (times relative to the fault's start, seconds)."""

    name: str
    start_s: float
    end_s: float
    acked: int       # finished OK in the window
    rate: float      # acked per second
    p99_ms: float | None  # None: nothing acknowledged started in it
    not_ok: int      # started in it, not acknowledged

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class FaultPhases:
    """The windows of one fault (those of positive length, in time order)."""

    fault: str
    phases: tuple[Phase, ...]

    def get(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    @property
    def rate_ratio(self) -> float | None:
        """during / before write rate (None when either window is missing or before is 0)."""
        before, during = self.get(BEFORE), self.get(DURING)
        if before is None or during is None or not before.rate:
            return None
        return during.rate / before.rate

    @property
    def p99_ratio(self) -> float | None:
        before, during = self.get(BEFORE), self.get(DURING)
        if before is None or during is None or not before.p99_ms or during.p99_ms is None:
            return None
        return during.p99_ms / before.p99_ms


def fault_phases(sends: Sequence[Send], faults: Sequence[Fault], grace_s: float = 5.0,
                 before_s: float = 10.0) -> tuple[FaultPhases, ...]:
    """The windows of every fault (see the module docstring)."""
    if not sends:
        return tuple(FaultPhases(f.name, ()) for f in faults)
    first = min(s.started for s in sends)
    last = max(s.started for s in sends)
    out = []
    for i, fault in enumerate(faults):
        start = fault.started
        healed = fault.healed if fault.healed is not None else last
        end = faults[i + 1].started if i + 1 < len(faults) else last
        windows = [(BEFORE, max(first, start - before_s), start),
                   (DETECTING, start, min(start + grace_s, healed)),
                   (DURING, start + grace_s, healed),
                   (AFTER, healed, end)]
        out.append(FaultPhases(fault.name, tuple(
            _phase(sends, name, a, b, start) for name, a, b in windows if b > a)))
    return tuple(out)


def rate_failures(phases: Sequence[FaultPhases], min_ratio: float) -> list[str]:
    """A failure line per fault whose during-rate is under min_ratio x its before-rate."""
    failures = []
    for fp in phases:
        ratio = fp.rate_ratio
        before, during = fp.get(BEFORE), fp.get(DURING)
        if ratio is None or before is None or during is None:
            failures.append(f"no write rate to compare before and during {fp.fault}")
        elif ratio < min_ratio:
            failures.append(f"write rate during {fp.fault}: {during.rate:.0f}/s, "
                            f"{ratio:.2f}x the {before.rate:.0f}/s before (wanted >= "
                            f"{min_ratio:.1f}x)")
    return failures


def _phase(sends: Sequence[Send], name: str, a: float, b: float, origin: float) -> Phase:
    acked = sum(1 for s in sends if s.outcome is SendOutcome.OK and a <= s.finished < b)
    started = [s for s in sends if a <= s.started < b]
    latencies = sorted((s.finished - s.started) * 1000 for s in started
                       if s.outcome is SendOutcome.OK)
    p99 = None
    if latencies:
        rank = max(1, -(-99 * len(latencies) // 100))  # nearest rank: ceil(0.99 n)
        p99 = latencies[rank - 1]
    return Phase(name, a - origin, b - origin, acked, acked / (b - a), p99,
                 sum(1 for s in started if s.outcome is not SendOutcome.OK))

"""The drill's verdict: what the History says about the cluster's promises.

Owns the rules (in the spirit of Jepsen / OpenChaos): an acknowledged send must reach every
consumer group of its topic (lost), nothing may be read that was not sent or whose send failed
(phantom), extra deliveries are counted by cause (duplicates), FIFO groups see each message
group in send order (order), and after each fault writes are acknowledged again (recovery) --
or, for a drill that expects the group to become unavailable, they are not until it is healed.

Duplicates come in two kinds a user tells apart: a redelivery (one stored record delivered
again: at-least-once, an ack lost or too late; legal) and a duplicate *stored* (a second record
of one message, e.g. a producer's retry written again: the same key at another queue offset,
whatever its message id). `stored_duplicates` counts the extra records once, however many
groups read them, and any is a failure: the master's duplicate window answers a retried send
with the original's receipt.

The client-view gap of a fault is what a producer's application feels: per client kind (the
project's own, the official one), the longest stretch between two successive acknowledgements
from the last one before the fault up to the first one after it was healed.

Several broker groups (`Expectation.broker_groups`): per group, the sends it stored (acked),
those it answered with a failure or not at all (failed, unknown: the group of the send's last
attempt) and the attempts it refused that the client moved to another group (moved away). A
fault in one group (`fault_group`) must not show in another: any failed, unknown or moved-away
send of another group fails the drill. A send whose group is not known (the official client
does not say which queue its last failed attempt used) is counted under UNATTRIBUTED.
A message stored in two groups (`copies_in_other_groups`) is reported apart from the stored
duplicates and does not fail the drill: the official clients resend a send whose answer was
lost to another group's queue (same message id), and one group's duplicate window cannot know
another's messages (RocketMQ's at-least-once across broker groups); the project's own
RoutedProducer never moves a send of unknown outcome, so its messages show none.

The write rate and p99 send latency before, during and after each fault are phases.py's; a
drill may require the rate during a fault to stay at a share of the rate before it
(`min_rate_ratio`: a slow replica must not slow the group down).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from cluster.drills.history import Ack, Fault, History, Receive, Send, SendOutcome
from cluster.drills.phases import FaultPhases, fault_phases, rate_failures

SHOWN = 5   # keys named per problem in a failure line

STORED_TWICE = "stored twice (another record)"
AFTER_ACK = "redelivered after an ack"
NOT_ACKED = "redelivered (not acked in time)"


@dataclass(frozen=True)
class Expectation:
    """What a drill must show: whether the group recovers (or must stay unavailable), which
    groups must receive every acked message, and which are checked for FIFO order."""

    # False for the drill where the group must become UNAVAILABLE, not lossy: then no send
    # started after a fault's start may finish OK before that fault's `healed`.
    recovers: bool = True
    fifo_groups: frozenset[str] = frozenset()   # consumer groups whose order is checked
    groups: tuple[str, ...] = ()                # groups that must receive every acked message
    topics_of_group: Mapping[str, str] = field(default_factory=dict)   # group -> its topic
    # label -> consumer group whose acknowledgements give a consumer's view of each fault
    consumer_views: Mapping[str, str] = field(default_factory=dict)
    # The rate during each fault (after `grace_s`) must be at least this share of the rate
    # before it (None: not judged; the phases are reported either way).
    min_rate_ratio: float | None = None
    grace_s: float = 5.0
    broker_groups: tuple[str, ...] = ()   # several broker groups: their names (else empty)
    fault_group: str = ""                 # the group the fault hits (with broker_groups)

    def __post_init__(self) -> None:
        if self.fault_group and self.fault_group not in self.broker_groups:
            raise ValueError(f"fault group {self.fault_group!r} is not one of "
                             f"{', '.join(self.broker_groups) or 'no groups'}")
        missing = [g for g in self.groups if g not in self.topics_of_group]
        if missing:
            raise ValueError(f"no topic for consumer group(s) {', '.join(missing)}")
        # Read-only copy: the dataclass is frozen, its mapping must not change under the checker.
        object.__setattr__(self, "topics_of_group", MappingProxyType(dict(self.topics_of_group)))


UNATTRIBUTED = "?"   # per-group figures of sends whose group is not known


@dataclass(frozen=True)
class GroupSends:
    """One broker group's share of the sends: stored there (acked), failed or unknown there
    (the last attempt's group), refused there and moved to another group by the client
    (moved_away), and acked there after another group refused them (moved_in)."""
    acked: int = 0
    failed: int = 0
    unknown: int = 0
    moved_away: int = 0
    moved_in: int = 0

    @property
    def troubled(self) -> int:
        """Sends this group did not serve: failed, unknown or moved away."""
        return self.failed + self.unknown + self.moved_away


@dataclass(frozen=True)
class DrillResult:
    """The checker's verdict on one drill's History: send outcomes, what was lost, phantom,
    duplicated or reordered, recovery times per fault, the longest outage, and the failures
    (empty: the drill passed)."""

    sends_ok: int
    sends_failed: int
    sends_unknown: int
    received: int                                  # distinct (group, key) pairs received
    lost: tuple[tuple[str, str], ...]              # (group, key) acked but never received
    phantom: tuple[tuple[str, str, str], ...]      # (group, key, why) received but not sent ok
    unknown_delivered: int                         # UNKNOWN sends received anyway (legal)
    unknown_never_delivered: int                   # UNKNOWN sends never received (legal)
    duplicates: Mapping[str, int]                  # why -> extra deliveries
    order_violations: tuple[str, ...]              # FIFO groups only
    recovery_s: tuple[float | None, ...]           # per fault
    longest_outage_s: float
    failures: tuple[str, ...]                      # empty = passed
    fifo_checked: bool = False                     # some group was checked for order
    stored_duplicates: int = 0                     # extra records of one message (all groups)
    # client kind ("own", "official") -> its client-view gap per fault (None: no ack after it)
    client_gaps: Mapping[str, tuple[float | None, ...]] = field(
        default_factory=lambda: MappingProxyType({}))
    # client kind -> per fault, when the acknowledgement that ended the gap came, counted from
    # the moment the drill saw the new master (negative: the client was served before that)
    client_resumed: Mapping[str, tuple[float | None, ...]] = field(
        default_factory=lambda: MappingProxyType({}))
    phases: tuple[FaultPhases, ...] = ()           # per fault: rate and p99 before/during/after
    # several broker groups: broker name (or UNATTRIBUTED) -> its sends; the faulted group
    per_group: Mapping[str, GroupSends] = field(default_factory=lambda: MappingProxyType({}))
    fault_group: str = ""
    copies_in_other_groups: int = 0   # a message stored in two groups (not a failure: above)

    @property
    def passed(self) -> bool:
        return not self.failures


def check(history: History, expect: Expectation) -> DrillResult:
    sends, receives = history.sends(), history.receives()
    acks, faults = history.acks(), history.faults()
    sends_of: dict[str, list[Send]] = defaultdict(list)
    for s in sends:
        sends_of[s.key].append(s)
    received_keys: dict[str, set[str]] = defaultdict(set)     # group -> keys it received
    for r in receives:
        if r.key is not None:
            received_keys[r.group].add(r.key)

    lost = _lost(sends, received_keys, expect)
    phantom = _phantom(receives, sends_of)
    deliveries_of = _deliveries(receives)
    duplicates = _duplicates(deliveries_of, acks)
    stored, across = _stored_duplicates(deliveries_of)
    order = _order_violations(deliveries_of, sends_of, expect.fifo_groups)
    recovery = tuple(_recovery(sends, fault) for fault in faults)
    delivered_anywhere = set().union(*received_keys.values())
    unknown = [s for s in sends if s.outcome is SendOutcome.UNKNOWN]
    unknown_delivered = sum(1 for s in unknown if s.key in delivered_anywhere)

    failures: list[str] = []
    for group in expect.groups:
        keys = [k for g, k in lost if g == group]
        if keys:
            failures.append(f"{len(keys)} acknowledged messages never consumed "
                            f"(group {group}: {first_of(keys)})")
    if phantom:
        failures.append(f"{len(phantom)} phantom reads "
                        f"({first_of([f'{g} {k}: {why}' for g, k, why in phantom], sep='; ')})")
    if order:
        failures.append(f"{len(order)} order violations ({first_of(list(order), sep='; ')})")
    if stored:
        failures.append(f"{stored} duplicates stored: a message written twice (a retried send "
                        f"stored again; duplicateWindowSeconds off or missed)")
    if expect.recovers:
        failures += [f"no acknowledged write after {f.name}"
                     for f, rec in zip(faults, recovery) if rec is None]
    else:
        failures += _available_while_faulted(sends, faults)
    phases = fault_phases(sends, faults, expect.grace_s)
    if expect.min_rate_ratio is not None:
        failures += rate_failures(phases, expect.min_rate_ratio)

    per_group = group_sends(sends, expect.broker_groups) if expect.broker_groups else {}
    failures += _other_group_failures(per_group, expect.fault_group)

    outcomes = Counter(s.outcome for s in sends)
    views = _client_views(sends, acks, faults, expect.consumer_views)
    return DrillResult(
        sends_ok=outcomes[SendOutcome.OK], sends_failed=outcomes[SendOutcome.FAILED],
        sends_unknown=outcomes[SendOutcome.UNKNOWN],
        received=sum(len(keys) for keys in received_keys.values()),
        lost=lost, phantom=phantom,
        unknown_delivered=unknown_delivered,
        unknown_never_delivered=len(unknown) - unknown_delivered,
        duplicates=duplicates, order_violations=order, recovery_s=recovery,
        longest_outage_s=_longest_outage(sends, faults), failures=tuple(failures),
        fifo_checked=bool(expect.fifo_groups), stored_duplicates=stored,
        client_gaps=MappingProxyType({c: tuple(g for g, _ in v) for c, v in views.items()}),
        client_resumed=MappingProxyType({c: tuple(r for _, r in v) for c, v in views.items()}),
        phases=phases, per_group=MappingProxyType(per_group),
        fault_group=expect.fault_group, copies_in_other_groups=across)


def group_sends(sends: list[Send], groups: tuple[str, ...]) -> dict[str, GroupSends]:
    """Per broker group (in `groups`' order, then UNATTRIBUTED when any send has no known
    group, or one outside `groups`), its GroupSends."""
    counts: dict[str, Counter[str]] = {g: Counter() for g in groups}
    for s in sends:
        group = s.group if s.group in counts or s.group in groups else UNATTRIBUTED
        c = counts.setdefault(group, Counter())
        c[s.outcome.value] += 1
        refused = s.refused_groups()
        for g in refused:
            counts.setdefault(g if g in groups else UNATTRIBUTED, Counter())["moved_away"] += 1
        if refused and s.outcome is SendOutcome.OK:
            c["moved_in"] += 1
    return {g: GroupSends(acked=c[SendOutcome.OK.value], failed=c[SendOutcome.FAILED.value],
                          unknown=c[SendOutcome.UNKNOWN.value], moved_away=c["moved_away"],
                          moved_in=c["moved_in"])
            for g, c in counts.items()}


def _other_group_failures(per_group: Mapping[str, GroupSends], fault_group: str) -> list[str]:
    if not fault_group:
        return []
    return [f"group {g} saw {n.troubled} failed sends during a fault in {fault_group} "
            f"({n.failed} failed, {n.unknown} unknown, {n.moved_away} moved away)"
            for g, n in per_group.items()
            if g not in (fault_group, UNATTRIBUTED) and n.troubled]


def first_of(items: list[str], sep: str = ", ") -> str:
    """The first SHOWN items joined, and how many more there are."""
    more = len(items) - SHOWN
    return sep.join(items[:SHOWN]) + (f"{sep}... (+{more} more)" if more > 0 else "")


def _lost(sends: list[Send], received_keys: Mapping[str, set[str]],
          expect: Expectation) -> tuple[tuple[str, str], ...]:
    lost: list[tuple[str, str]] = []
    for group in expect.groups:
        topic, got = expect.topics_of_group[group], received_keys.get(group, set())
        # dict: keys in send order, once each even if a key was sent (and acked) twice
        acked = dict.fromkeys(s.key for s in sends
                              if s.topic == topic and s.outcome is SendOutcome.OK)
        lost += [(group, key) for key in acked if key not in got]
    return tuple(lost)


def _phantom(receives: list[Receive],
             sends_of: Mapping[str, list[Send]]) -> tuple[tuple[str, str, str], ...]:
    phantom: dict[tuple[str, str], str] = {}    # (group, key) -> why; first receive's order
    for r in receives:
        if r.key is None:
            # A foreign body has no key: its message id names it (one entry per message).
            phantom.setdefault((r.group, r.message_id), "not a drill message")
            continue
        sent = sends_of.get(r.key, [])
        if not sent:
            phantom.setdefault((r.group, r.key), "never sent")
        elif all(s.outcome is SendOutcome.FAILED for s in sent):
            last = max(sent, key=lambda s: s.finished)
            phantom.setdefault((r.group, r.key), f"send failed: {last.detail}")
    return tuple((g, k, why) for (g, k), why in phantom.items())


def _deliveries(receives: list[Receive]) -> dict[tuple[str, str], list[Receive]]:
    """(group, key) -> its deliveries ordered by time (stable: history order breaks ties)."""
    by_pair: dict[tuple[str, str], list[Receive]] = defaultdict(list)
    for r in sorted(receives, key=lambda r: r.at):
        if r.key is not None:
            by_pair[(r.group, r.key)].append(r)
    return by_pair


def _duplicates(deliveries_of: Mapping[tuple[str, str], list[Receive]],
                acks: list[Ack]) -> Mapping[str, int]:
    first_ok_ack: dict[tuple[str, str, str], float] = {}
    for a in acks:
        if a.ok:
            k = (a.group, a.key, a.message_id)
            first_ok_ack[k] = min(a.at, first_ok_ack.get(k, a.at))
    counts: Counter[str] = Counter()
    for (group, key), deliveries in deliveries_of.items():
        first = deliveries[0]
        acked_at = first_ok_ack.get((group, key, first.message_id))
        for d in deliveries[1:]:
            if _record(d) != _record(first):
                counts[STORED_TWICE] += 1        # the producer's retry stored a second copy
            elif acked_at is not None and acked_at < d.at:
                counts[AFTER_ACK] += 1           # the ack was answered but lost (e.g. failover)
            else:
                counts[NOT_ACKED] += 1           # invisible time ran out first: at-least-once
    return MappingProxyType({why: n for why, n in counts.items() if n})


def _record(r: Receive) -> tuple[str, str, int, int, str]:
    """Which stored record a delivery is: its group, queue and offset (a redelivery keeps
    them) and message id (the official clients keep one id over their retries, the project's
    own client's older versions did not)."""
    return r.broker, r.topic, r.queue_id, r.queue_offset, r.message_id


def _stored_duplicates(deliveries_of: Mapping[tuple[str, str], list[Receive]]
                       ) -> tuple[int, int]:
    """Extra records of one message within one broker group (per key, the most distinct
    records of one group any one consumer group read, minus one: a late group reading the
    same two records does not make four), and copies in other broker groups (per key, the
    groups holding it minus one: a client's retry in another group after a lost answer,
    which no group's duplicate window can see)."""
    within: dict[str, int] = {}
    across: dict[str, int] = {}
    for (_group, key), deliveries in deliveries_of.items():
        records: dict[str, set] = defaultdict(set)
        for d in deliveries:
            records[d.broker].add(_record(d))
        within[key] = max(within.get(key, 0), max(len(r) for r in records.values()) - 1)
        across[key] = max(across.get(key, 0), len(records) - 1)
    return sum(within.values()), sum(across.values())


View = tuple[float | None, float | None]   # (gap, when it ended after the heal)


def _client_views(sends: list[Send], acks: list[Ack], faults: list[Fault],
                  consumer_views: Mapping[str, str]) -> dict[str, tuple[View, ...]]:
    """Per producer kind (acknowledged sends) and per watched consumer group (its acks)."""
    if not faults:
        return {}
    acks_of: dict[str, list[float]] = defaultdict(list)
    for s in sends:
        acks_of.setdefault(s.client, [])
        if s.outcome is SendOutcome.OK:
            acks_of[s.client].append(s.finished)
    label_of = {group: label for label, group in consumer_views.items()}
    for label in consumer_views:
        acks_of.setdefault(label, [])
    for a in acks:
        if a.ok and a.group in label_of:
            acks_of[label_of[a.group]].append(a.at)
    return {client: tuple(client_gap(sorted(acks), f) for f in faults)
            for client, acks in sorted(acks_of.items())}


def client_gap(acks: list[float], fault: Fault) -> View:
    """The longest stretch without an acknowledgement (`acks`: sorted finish times) from the
    last one before the fault started to the first one at or after it was healed, and when
    the acknowledgement that ended it came counted from the heal; (None, None) when nothing
    was acknowledged after the fault."""
    healed = fault.started if fault.healed is None else max(fault.healed, fault.started)
    before = [t for t in acks if t <= fault.started]
    points = [before[-1] if before else fault.started]
    for t in acks:
        if t > fault.started:
            points.append(t)
            if t >= healed:
                break
    if len(points) < 2 or points[-1] < healed:
        return None, None
    gap, end = max((b - a, b) for a, b in zip(points, points[1:]))
    return gap, end - healed


def _order_violations(deliveries_of: Mapping[tuple[str, str], list[Receive]],
                      sends_of: Mapping[str, list[Send]],
                      fifo_groups: frozenset[str]) -> tuple[str, ...]:
    firsts: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)  # -> [(seq, key)]
    for group, key in deliveries_of:
        sent = sends_of.get(key)
        if group not in fifo_groups or not sent or sent[0].message_group is None:
            continue    # phantom or not FIFO: nothing to order against
        firsts[(group, sent[0].message_group)].append((sent[0].seq, key))
    # deliveries_of is keyed in first-delivery order, so each list is in first-delivery order.
    violations: list[str] = []
    for (group, message_group), seqs in firsts.items():
        highest: int | None = None
        for seq, _key in seqs:
            # Strictly lower only: an equal seq is a resend of the same position, not a reorder.
            if highest is not None and seq < highest:
                violations.append(f"group {group}, message group {message_group}: "
                                  f"seq {seq} delivered after seq {highest}")
            highest = seq if highest is None else max(highest, seq)
    return tuple(violations)


def _recovery(sends: list[Send], fault: Fault) -> float | None:
    after = [s for s in sends if s.outcome is SendOutcome.OK and s.started >= fault.started]
    if not after:
        return None
    # The first acknowledgement among sends begun after the fault: a send begun earlier may be
    # answered by the old master just before it went away; one begun later and stuck on a
    # dead node for its whole timeout must not hide a faster one on the new master.
    return min(s.finished for s in after) - fault.started


def _longest_outage(sends: list[Send], faults: list[Fault]) -> float:
    if not faults:
        return 0.0
    start = min(f.started for f in faults)
    finishes = sorted(s.finished for s in sends
                      if s.outcome is SendOutcome.OK and s.finished >= start)
    points = [start, *finishes]
    return max((b - a for a, b in zip(points, points[1:])), default=0.0)


def _available_while_faulted(sends: list[Send], faults: list[Fault]) -> list[str]:
    failures = []
    for fault in faults:
        healed = float("inf") if fault.healed is None else fault.healed
        bad = [s.key for s in sends if s.outcome is SendOutcome.OK
               and s.started >= fault.started and s.finished < healed]
        if bad:
            failures.append(f"{len(bad)} sends acknowledged while it should be unavailable "
                            f"({fault.name}: {first_of(bad)})")
    return failures

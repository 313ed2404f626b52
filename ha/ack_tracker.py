"""The master's view of its slaves: acks, the in-sync set, the confirm offset and the puts that
wait for replication. No I/O; time comes from an injected Clock (monotonic seconds).

Rules (after RocketMQ's auto-switch SyncStateSet upkeep and GroupTransferService):

* Caught up: an ack at or beyond the master max recorded at the slave's last transfer means
  the slave had everything the master had at that transfer's time; an ack at or beyond the
  current master max means it is caught up now.
* Join (on an ack): a connected slave enters the in-sync set when it caught up within
  `max_catchup_ms`, lags by at most `max_gap` bytes, and its ack is >= the confirm offset, so
  that adding it never lowers the confirm offset.
* Leave: on disconnect (or a new session), or in `refresh` when it lags by more than
  `max_gap` or has not caught up for longer than `max_catchup_ms`.
* Slow (ha/ack_latency.py): a member whose acks hold puts back leaves too, in `refresh`, once
  the slow-member rule held for its window (`SlowRule`; off with haMaxSlaveAckLatency=0); it
  is then **held out** (also across reconnects) until it was fast and within `max_gap` for
  the rejoin time (longer after repeated removals). Then it is **joining**: puts wait for it
  and the confirm offset counts it as for a member, and it joins at its first ack at or
  beyond the confirm offset. (The caught-up rule is not asked of it: under a load that keeps
  puts in flight all the time, a slave nobody waits for is never caught up with the newest
  transfer; once puts wait for it, an ack at the confirm offset is what makes it safe.)
* Every change of the in-sync set is counted per slave with its reason (`states`,
  `member_notes`: what the master tells the controller).
* Confirm offset: min(ack of every in-sync slave, master max); master max when no slave is in
  sync. The value handed out never decreases.
* Replication wait for a put ending at `end_offset`: PUT_OK once `required_acks()` in-sync
  slaves acked >= end_offset (with all_ack: every in-sync slave, and at least one);
  FLUSH_SLAVE_TIMEOUT when `expire`/`refresh` runs after the deadline. A put that has to wait
  is what the ack latencies are measured against (its end and when it began to wait), and the
  slave whose ack releases it is the one that held it back (`released_puts`, `released_wait`).

The master itself counts towards `min_in_sync_replicas` (as in RocketMQ), but a put always
waits for at least one slave (RocketMQ 5 does not wait at all when inSyncReplicas <= 1).

Under a controller (`set_approved`): the controller approves the sync state set, the nodes it
may elect. Every approved slave stays a **member** until the controller drops it, also when it
left the local in-sync set or disconnected, and slaves that joined locally are members at once.
Puts wait for the ack of every member (all-ack, whatever `all_ack` says) and the confirm offset
is the minimum over the members, so an electable node holds every acknowledged write and every
message a consumer read. A member that left locally therefore blocks puts (they time out) until
the controller confirms its removal, one heartbeat later.

One lock guards all state. Completions are resolved after it is released: their callbacks may
call back into the tracker, and the lock is not reentrant.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.clock import Clock
from common.completion import Completion
from common.config_values import ConfigError
from store.put_result import PutStatus
from common.yielding_lock import YieldingLock

from .ack_latency import REJOIN_MARGIN, AckLatency, AppendTimes, SlowRule, percentile

# Why a slave left or joined the in-sync set (SlaveAckState.last_cause; a metric's label).
SLOW, LAGGING, NOT_CAUGHT_UP = "slow", "lagging", "not_caught_up"
DISCONNECTED, NEW_SESSION = "disconnected", "new_session"
CAUGHT_UP, FAST_AGAIN = "caught_up", "fast_again"
CAUSES = (SLOW, LAGGING, NOT_CAUGHT_UP, DISCONNECTED, NEW_SESSION, CAUGHT_UP, FAST_AGAIN)


@dataclass(frozen=True)
class SlaveAckState:
    """One slave, for status output. Latencies are over the slow rule's window; `held_out`
    says why a slow slave is kept out of the in-sync set ("" if it is not)."""

    slave_id: str
    ack_offset: int
    flushed_offset: int
    in_sync: bool
    last_ack_age_ms: int
    last_caught_up_age_ms: int  # -1 if never caught up
    ack_latency_ms: float = 0.0      # the rule's score: median of the window, or pending age
    ack_latency_p99_ms: float = 0.0  # of the window's samples
    pending_ms: float = 0.0          # age of the oldest waited-for data it has not acked
    held_out: str = ""
    in_sync_changes: int = 0         # leaves + joins in this master term
    last_change: str = ""            # "left: <why>" / "joined: <why>"
    last_cause: str = ""             # the last change's cause, one of CAUSES ("": none)
    last_change_age_ms: int = -1
    released_puts: int = 0           # puts its ack was the last to release
    released_wait_ms: float = 0.0    # their summed wait


class _Slave:
    """One connected slave's replication state (guarded by AckTracker's lock)."""

    __slots__ = ("ack_offset", "flushed_offset", "last_ack_at", "transfer_max", "transfer_at",
                 "caught_up_at", "latency")

    def __init__(self, ack_offset: int, now: float) -> None:
        self.ack_offset = ack_offset
        self.flushed_offset = 0
        self.last_ack_at = now  # the handshake counts as the first sign of life
        self.transfer_max: int | None = None  # master max at the last transfer/heartbeat
        self.transfer_at = 0.0
        self.caught_up_at: float | None = None
        self.latency = AckLatency()


class _Record:
    """What the tracker keeps of a slave across its sessions, for this master term (guarded
    by AckTracker's lock): the slow rule's state, the in-sync changes and the puts it held."""

    __slots__ = ("held_out", "strikes", "slow_since", "fast_since", "returned_at",
                 "return_note", "changes", "last_change", "last_cause", "last_change_at",
                 "released_puts", "released_wait_s")

    def __init__(self) -> None:
        self.held_out = ""  # why it is held out for slowness; "" if it is not
        self.strikes = 0  # removals for slowness in a row (each doubles the rejoin time)
        self.slow_since: float | None = None
        self.fast_since: float | None = None
        self.returned_at: float | None = None  # when a hold last ended
        self.return_note = ""  # why the hold ended: the reason of the next join
        self.changes = 0
        self.last_change = ""
        self.last_cause = ""
        self.last_change_at: float | None = None
        self.released_puts = 0
        self.released_wait_s = 0.0


class _Waiter:
    __slots__ = ("end_offset", "completion", "started")

    def __init__(self, end_offset: int, completion: Completion[PutStatus],
                 started: float) -> None:
        self.end_offset = end_offset
        self.completion = completion
        self.started = started


class AckTracker:
    """The master's record of its slaves for one master term (the rules of the module
    docstring): owns each connected slave's ack state and latencies, each known slave's record
    (slow-rule state, in-sync changes), the in-sync set, the controller's approved set, the
    confirm offset handed out (never decreasing), the puts waiting for acks and when the data
    they wait for began to wait (AppendTimes).

    `_lock` (a YieldingLock, not reentrant) guards all of that; it is taken by every sync put
    and every ack from gRPC, put and housekeeping threads. Waiters are completed after it is
    released, since completion callbacks may call back into the tracker."""

    def __init__(self, clock: Clock, *, max_gap: int, max_catchup_ms: int, in_sync_replicas: int,
                 min_in_sync_replicas: int, all_ack: bool, slow: SlowRule = SlowRule()) -> None:
        for name, value, low in (("max_gap", max_gap, 0), ("max_catchup_ms", max_catchup_ms, 0),
                                 ("in_sync_replicas", in_sync_replicas, 1),
                                 ("min_in_sync_replicas", min_in_sync_replicas, 1)):
            if value < low:
                raise ConfigError(f"{name} must be >= {low}, got {value}")
        self._clock = clock
        self._max_gap = max_gap
        self._max_catchup_s = max_catchup_ms / 1000.0
        self._in_sync_replicas = in_sync_replicas
        self._min_in_sync_replicas = min_in_sync_replicas
        self._all_ack = all_ack
        self._slow = slow
        self._lock = YieldingLock()  # taken by every sync put and every ack: must not convoy
        self._slaves: dict[str, _Slave] = {}
        self._records: dict[str, _Record] = {}
        self._marks = AppendTimes()
        self._in_sync: set[str] = set()
        self._joining: set[str] = set()  # held out until now: waited for, not in sync yet
        self._approved: frozenset[str] | None = None  # the controller's set; None: no controller
        self._confirmed = 0  # highest confirm offset handed out
        self._waiters: list[_Waiter] = []

    # -- slave sessions -----------------------------------------------------------------------
    def connect(self, slave_id: str, ack_offset: int) -> None:
        """A slave session started (after the handshake) at ack_offset; not in sync yet. A new
        session of a known slave replaces the old one."""
        with self._lock:
            now = self._clock.monotonic()
            self._leave(slave_id, NEW_SESSION, "a new replication session", now)
            self._joining.discard(slave_id)
            self._slaves[slave_id] = _Slave(ack_offset, now)
            released = self._take_released()
        _resolve(released, PutStatus.PUT_OK)

    def disconnect(self, slave_id: str) -> None:
        """Forget the slave; it leaves the in-sync set at once."""
        with self._lock:
            self._slaves.pop(slave_id, None)
            self._leave(slave_id, DISCONNECTED, "disconnected", self._clock.monotonic())
            self._joining.discard(slave_id)
            # With all_ack a smaller set can release waiters the departed slave was blocking.
            released = self._take_released()
        _resolve(released, PutStatus.PUT_OK)

    def on_transfer(self, slave_id: str, master_max: int) -> None:
        """The master sent this slave everything below master_max (or a heartbeat at it)."""
        with self._lock:
            slave = self._slaves.get(slave_id)
            if slave is not None:  # a late call for a closed session is ignored
                slave.transfer_max = master_max
                slave.transfer_at = self._clock.monotonic()

    def on_ack(self, slave_id: str, ack_offset: int, flushed_offset: int, master_max: int) -> None:
        """Record an ack, update caught-up time and membership, release satisfied waiters."""
        with self._lock:
            slave = self._slaves.get(slave_id)
            if slave is None:
                return
            now = self._clock.monotonic()
            self._sample(slave, ack_offset, now)
            # Acks of one session only move forward (TCP keeps them ordered); max() keeps a
            # confused slave from un-acking data a waiter was already released for.
            slave.ack_offset = max(slave.ack_offset, ack_offset)
            slave.flushed_offset = max(slave.flushed_offset, flushed_offset)
            slave.last_ack_at = now
            if slave.transfer_max is not None and slave.ack_offset >= slave.transfer_max:
                slave.caught_up_at = max(slave.caught_up_at or 0.0, slave.transfer_at)
            if slave.ack_offset >= master_max:
                slave.caught_up_at = now
            if (slave_id not in self._in_sync
                    and not self._record(slave_id).held_out
                    and (slave_id in self._joining or self._recently_caught_up(slave, now))
                    and master_max - slave.ack_offset <= self._max_gap
                    and slave.ack_offset >= self._confirm_locked(master_max)):
                self._join(slave_id, now)
            released = self._take_released()
            if released:  # this ack was the last one they waited for
                record = self._record(slave_id)
                record.released_puts += len(released)
                record.released_wait_s += sum(now - w.started for w in released)
            self._marks.drop_up_to(min(s.ack_offset for s in self._slaves.values()))
        _resolve(released, PutStatus.PUT_OK)

    def refresh(self, master_max: int) -> None:
        """Housekeeping: drop lagging slaves from the set, recompute the confirm offset,
        release what the smaller set allows, then time out due waiters. Safe at any time."""
        with self._lock:
            now = self._clock.monotonic()
            for slave_id in list(self._in_sync):
                slave = self._slaves[slave_id]
                gap = master_max - slave.ack_offset
                if gap > self._max_gap:
                    self._leave(slave_id, LAGGING, f"lags {gap} bytes, over "
                                                   f"haMaxGapNotInSync={self._max_gap}", now)
                elif not self._recently_caught_up(slave, now):
                    self._leave(slave_id, NOT_CAUGHT_UP,
                                f"not caught up for over haMaxTimeSlaveNotCatchup="
                                f"{int(self._max_catchup_s * 1000)} ms", now)
            self._judge_latency(now, master_max)
            if not self._slaves:  # nobody to measure: forget what waited
                self._marks.drop_up_to(master_max)
            self._confirm_locked(master_max)
            released = self._take_released()
            expired = self._take_expired(now)
        _resolve(released, PutStatus.PUT_OK)
        _resolve(expired, PutStatus.FLUSH_SLAVE_TIMEOUT)

    def set_approved(self, slave_ids: frozenset[str] | None) -> None:
        """The slaves of the sync state set the controller approved (None: no controller)."""
        with self._lock:
            self._approved = slave_ids
            released = self._take_released()
        _resolve(released, PutStatus.PUT_OK)

    # -- queries ------------------------------------------------------------------------------
    def confirm_offset(self, master_max: int) -> int:
        """min(ack of every in-sync slave, master_max), master_max with none in sync. Never
        decreases while this tracker lives: consumers read up to it, and a message they saw
        must not disappear from view within one master term (a new term builds a new tracker)."""
        with self._lock:
            return self._confirm_locked(master_max)

    def in_sync_ids(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._in_sync)

    def member_ids(self) -> frozenset[str]:
        """The slaves a put waits for under a controller (see the module doc); the in-sync set
        without one."""
        with self._lock:
            return frozenset(self._members())

    def in_sync_count(self) -> int:
        """In-sync slaves (the master not included)."""
        with self._lock:
            return len(self._in_sync)

    def enough_in_sync(self) -> bool:
        """The master plus its in-sync slaves reach min_in_sync_replicas (else a put is
        answered IN_SYNC_REPLICAS_NOT_ENOUGH)."""
        with self._lock:
            return 1 + len(self._in_sync) >= self._min_in_sync_replicas

    def required_acks(self) -> int:
        """Slave acks a put needs: every in-sync slave with all_ack, else in_sync_replicas - 1
        (the master's own copy counts); at least 1 either way."""
        with self._lock:
            return self._required_locked()

    def ack_offset(self, slave_id: str) -> int | None:
        with self._lock:
            slave = self._slaves.get(slave_id)
            return None if slave is None else slave.ack_offset

    def member_notes(self) -> dict[str, str]:
        """Each known slave's last in-sync change with its reason ("left: ..." / "joined:
        ..."): what the master tells the controller, which logs it with the change."""
        with self._lock:
            return {slave_id: r.last_change for slave_id, r in sorted(self._records.items())
                    if r.last_change}

    def out_of_sync_note(self) -> str:
        """"; out: <slave> (<why>)..." for the known slaves outside the in-sync set that left
        it, "" when there are none: appended to a refusal for too few replicas in sync."""
        with self._lock:
            out = [f"{slave_id} ({r.held_out and 'slow: ' + r.held_out or r.last_change})"
                   for slave_id, r in sorted(self._records.items())
                   if slave_id not in self._in_sync and r.last_change.startswith("left")]
        return f"; out: {', '.join(out)}" if out else ""

    def states(self, master_max: int) -> list[SlaveAckState]:
        """Every connected slave, sorted by id. (master_max is accepted for the callers'
        convenience; the reported values do not depend on it.)"""
        del master_max
        with self._lock:
            now = self._clock.monotonic()
            window_s = self._slow.window_s
            out = []
            for slave_id, s in sorted(self._slaves.items()):
                r = self._record(slave_id)
                pending = self._pending_s(s, now)
                out.append(SlaveAckState(
                    slave_id=slave_id,
                    ack_offset=s.ack_offset,
                    flushed_offset=s.flushed_offset,
                    in_sync=slave_id in self._in_sync,
                    last_ack_age_ms=_age_ms(now, s.last_ack_at),
                    last_caught_up_age_ms=-1 if s.caught_up_at is None
                    else _age_ms(now, s.caught_up_at),
                    ack_latency_ms=s.latency.score(now, window_s, pending) * 1000.0,
                    ack_latency_p99_ms=percentile(s.latency.recent(now, window_s), 0.99) * 1000,
                    pending_ms=pending * 1000.0,
                    held_out=r.held_out,
                    in_sync_changes=r.changes,
                    last_change=r.last_change,
                    last_cause=r.last_cause,
                    last_change_age_ms=-1 if r.last_change_at is None
                    else _age_ms(now, r.last_change_at),
                    released_puts=r.released_puts,
                    released_wait_ms=r.released_wait_s * 1000.0))
            return out

    # -- replication waits --------------------------------------------------------------------
    def wait(self, end_offset: int, timeout_ms: int) -> Completion[PutStatus]:
        """A completion resolved PUT_OK once enough in-sync slaves acked end_offset (at once if
        they already have), or FLUSH_SLAVE_TIMEOUT by expire/refresh after the deadline."""
        with self._lock:
            now = self._clock.monotonic()
            completion: Completion[PutStatus] = Completion(now + timeout_ms / 1000.0)
            satisfied = self._released_up_to()
            if satisfied is None or end_offset > satisfied:
                self._waiters.append(_Waiter(end_offset, completion, now))
                self._marks.add(end_offset, now)
                return completion
        completion.complete(PutStatus.PUT_OK)
        return completion

    def waiting(self) -> int:
        """How many puts wait for acks now."""
        with self._lock:
            return len(self._waiters)

    def expire(self) -> int:
        """Time out every waiter whose deadline passed; returns how many."""
        with self._lock:
            expired = self._take_expired(self._clock.monotonic())
        _resolve(expired, PutStatus.FLUSH_SLAVE_TIMEOUT)
        return len(expired)

    def fail_all(self, status: PutStatus) -> None:
        """Resolve every waiter with status (role change, shutdown)."""
        with self._lock:
            waiters, self._waiters = self._waiters, []
        _resolve(waiters, status)

    # -- internals (call with the lock held) -----------------------------------------------------
    def _recently_caught_up(self, slave: _Slave, now: float) -> bool:
        return slave.caught_up_at is not None and now - slave.caught_up_at <= self._max_catchup_s

    def _record(self, slave_id: str) -> _Record:
        record = self._records.get(slave_id)
        if record is None:
            record = self._records[slave_id] = _Record()
        return record

    def _join(self, slave_id: str, now: float) -> None:
        record = self._record(slave_id)
        self._in_sync.add(slave_id)
        self._joining.discard(slave_id)
        record.changes += 1
        record.last_change = f"joined: {record.return_note or 'caught up'}"
        record.last_cause = FAST_AGAIN if record.return_note else CAUGHT_UP
        record.last_change_at = now
        record.return_note = ""

    def _leave(self, slave_id: str, cause: str, reason: str, now: float) -> None:
        if slave_id not in self._in_sync:
            return
        self._in_sync.discard(slave_id)
        record = self._record(slave_id)
        record.changes += 1
        record.last_change = f"left: {reason}"
        record.last_cause = cause
        record.last_change_at = now

    def _sample(self, slave: _Slave, ack_offset: int, now: float) -> None:
        """An ack moving from slave.ack_offset to ack_offset: its latency sample is the age of
        the oldest waited-for put it acknowledges whole (a put acked in part is measured when
        the rest comes)."""
        oldest = self._marks.first_after(slave.ack_offset)
        if oldest is not None and oldest[0] <= ack_offset:
            slave.latency.add(now, now - oldest[1])

    def _pending_s(self, slave: _Slave, now: float) -> float:
        oldest = self._marks.first_after(slave.ack_offset)
        return 0.0 if oldest is None else max(0.0, now - oldest[1])

    def _judge_latency(self, now: float, master_max: int) -> None:
        """The slow-member rule (ha/ack_latency.py): hold out an in-sync (or joining) slave
        that was slow for a whole window; end the hold of one that was fast and within the gap
        for its rejoin time: it is joining then (see the module docstring)."""
        rule = self._slow
        if not rule.enabled:
            return
        window_s = rule.window_s
        scores = {slave_id: s.latency.score(now, window_s, self._pending_s(s, now))
                  for slave_id, s in self._slaves.items()}
        for slave_id in sorted(self._in_sync | self._joining):  # scores before any removal
            record = self._record(slave_id)
            reason = rule.verdict(scores[slave_id], self._fastest_other(slave_id, scores))
            if not reason:
                record.slow_since = None
                continue
            if record.slow_since is None:
                record.slow_since = now
            if now - record.slow_since >= window_s:
                record.strikes = rule.strikes_after(
                    record.strikes, None if record.returned_at is None
                    else now - record.returned_at)
                record.held_out = reason
                record.slow_since = record.fast_since = None
                self._joining.discard(slave_id)
                self._leave(slave_id, SLOW, f"slow: {reason}", now)
        for slave_id, record in self._records.items():
            slave = self._slaves.get(slave_id)
            if not record.held_out or slave is None:
                continue
            slow = rule.verdict(scores[slave_id], self._fastest_other(slave_id, scores),
                                REJOIN_MARGIN)
            if slow or master_max - slave.ack_offset > self._max_gap:
                record.fast_since = None
                continue
            if record.fast_since is None:
                record.fast_since = now
            hold = rule.hold_s(record.strikes)
            if now - record.fast_since >= hold:
                record.return_note = (f"fast again for {hold:.0f} s (acks take "
                                      f"{scores[slave_id] * 1000:.0f} ms; was out: "
                                      f"{record.held_out})")
                record.held_out = ""
                record.fast_since = None
                record.returned_at = now
                self._joining.add(slave_id)

    def _fastest_other(self, slave_id: str, scores: dict[str, float]
                       ) -> tuple[str, float] | None:
        others = [(scores[s], s) for s in self._in_sync if s != slave_id and s in scores]
        if not others:
            return None
        score, other = min(others)
        return other, score

    def _members(self) -> set[str]:
        members = self._in_sync | self._joining if self._joining else self._in_sync
        return members if self._approved is None else members | self._approved

    def _member_ack(self, slave_id: str) -> int:
        slave = self._slaves.get(slave_id)
        return slave.ack_offset if slave is not None else 0  # an approved slave not connected

    def _confirm_locked(self, master_max: int) -> int:
        value = min([self._member_ack(s) for s in self._members()] + [master_max])
        self._confirmed = max(self._confirmed, value)
        return self._confirmed

    def _required_locked(self) -> int:
        if self._all_ack or self._approved is not None:
            return max(1, len(self._members()))
        return max(1, self._in_sync_replicas - 1)

    def _released_up_to(self) -> int | None:
        """Highest end offset a waiter may have and be satisfied now; None if none can be.
        Satisfaction is monotonic in the end offset, so one threshold decides every waiter:
        the required-th highest ack among the members."""
        acks = sorted((self._member_ack(s) for s in self._members()), reverse=True)
        needed = self._required_locked()
        if len(acks) < needed:  # with all_ack this only happens when the set is empty
            return None
        return acks[needed - 1]

    def _take_released(self) -> list[_Waiter]:
        threshold = self._released_up_to()
        if threshold is None or not self._waiters:
            return []
        released = [w for w in self._waiters if w.end_offset <= threshold]
        if released:
            self._waiters = [w for w in self._waiters if w.end_offset > threshold]
        return released

    def _take_expired(self, now: float) -> list[_Waiter]:
        expired = [w for w in self._waiters if w.completion.deadline <= now]
        if expired:
            self._waiters = [w for w in self._waiters if w.completion.deadline > now]
        return expired


def _resolve(waiters: list[_Waiter], status: PutStatus) -> None:
    # Outside the tracker's lock: completion callbacks may call back into the tracker.
    for w in waiters:
        w.completion.complete(status)


def _age_ms(now: float, then: float) -> int:
    return max(0, int(round((now - then) * 1000)))

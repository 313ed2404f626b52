"""How long each slave takes to ack what a put waits for, and the rule that finds a slave which
holds the group back (a gray failure: alive, acking, but slow). No I/O, no locks: the
AckTracker owns these objects and calls them under its lock, with its clock's time.

Why time and not offsets: a SYNC_MASTER waits for every member's ack, so a member that acks
slowly but steadily holds the producers back, and producers held back write nothing new: the
member is "caught up" at every ack and within any byte gap. What gives it away is how long
each put waits for its ack, which is what the producers feel.

Measures
* `AppendTimes`: when each put began to wait for acks (right after its append; under
  SYNC_FLUSH after its flush): its end offset and that time, for the puts that had to wait,
  one entry per millisecond at most. A member's
  ack from `a0` to `a1` covered data first waited for at the time of the first entry beyond
  `a0`: its **ack latency sample** is the ack's time minus that. Entries every connected slave
  acked are dropped; at most MAX_MARKS are kept (a member further behind is measured from the
  oldest entry kept, i.e. less than it is, and is out long before).
* `AckLatency`, per member: the samples of the last `window` (at least the newest
  MIN_SAMPLES of the last HORIZON windows); its **score** is their median, or the age of the
  oldest data it has not acked yet (its pending age) when that is larger and at least a
  window long, so a member that stopped acking scores as badly as one that acks late. No
  samples and nothing pending that long: 0 (nothing to hold back).

The rule (`SlowRule.verdict`), for a member with score `s` against the fastest other in-sync
member's score `f`:
* never slow when it is the fastest (`s <= f`) or alone: a put waits for at least one slave,
  so removing the fastest one speeds nothing up (and a slow master makes every member slow
  alike: nobody is removed for that);
* slow when `s > haMaxSlaveAckLatency` (the absolute bound, in the spirit of Kafka's
  replica.lag.time.max.ms), or when `s > haSlowSlaveLatencyRatio * f` and
  `s > haSlowSlaveMinLatency` (the relative rule; the floor keeps a loaded but healthy group,
  whose members all ack in a few ms, from flapping over ratios of small numbers).
The tracker removes a member once it was slow continuously for `window`, and lets it back
after it was fast (the same rule with the member's score doubled: hysteresis against
flapping) and within the byte gap for `rejoin`, doubled for each removal that follows a
return within HOLD_RESET_FACTOR rejoin times (up to MAX_HOLD_FACTOR times), since a member
that is slow again at once would otherwise cycle.
"""
from __future__ import annotations

import bisect
import itertools
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.config_values import ConfigError

if TYPE_CHECKING:
    from store.config import StoreConfig

MAX_MARKS = 65_536          # entries of AppendTimes (about a minute of puts at 1 per ms)
MARK_GRANULARITY_S = 0.001  # puts within this of the newest entry extend it
MAX_SAMPLES = 1024          # per member: the median of the newest ones suffices (the
                            # rule sorts them 20 times a second)
MIN_SAMPLES = 3             # fewer samples in the window: the newest this many are judged
HORIZON = 5                 # windows after which a sample no longer counts at all
REJOIN_MARGIN = 2.0         # fast = not slow with the score doubled
MAX_HOLD_FACTOR = 8         # the rejoin time doubles per repeated removal up to this factor
HOLD_RESET_FACTOR = 8       # a removal this many rejoin times after the return starts afresh


@dataclass(frozen=True)
class SlowRule:
    """The slow-member rule's settings (StoreConfig keys in brackets; all ms but the ratio).
    `max_latency_ms` 0 turns detection off; `ratio` 0 turns the relative rule off."""

    max_latency_ms: int = 1000   # haMaxSlaveAckLatency
    ratio: int = 4               # haSlowSlaveLatencyRatio
    min_latency_ms: int = 50     # haSlowSlaveMinLatency
    window_ms: int = 1000        # haSlowSlaveDetectWindow
    rejoin_ms: int = 5000        # haSlowSlaveRejoinTime

    def __post_init__(self) -> None:
        for name in ("max_latency_ms", "ratio", "min_latency_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("window_ms", "rejoin_ms"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def of(cls, c: "StoreConfig") -> "SlowRule":
        """The rule a store config sets (its ha*Slave* keys)."""
        return cls(max_latency_ms=c.ha_max_slave_ack_latency,
                   ratio=c.ha_slow_slave_latency_ratio,
                   min_latency_ms=c.ha_slow_slave_min_latency,
                   window_ms=c.ha_slow_slave_detect_window,
                   rejoin_ms=c.ha_slow_slave_rejoin_time)

    @property
    def enabled(self) -> bool:
        return self.max_latency_ms > 0

    @property
    def window_s(self) -> float:
        return self.window_ms / 1000.0

    def hold_s(self, strikes: int) -> float:
        """How long a member removed `strikes` times in a row must stay fast to return."""
        factor = min(MAX_HOLD_FACTOR, 2 ** max(0, strikes - 1))
        return self.rejoin_ms * factor / 1000.0

    def strikes_after(self, strikes: int, since_return_s: float | None) -> int:
        """The strikes of a member removed now, after `strikes` earlier removals, its last
        return `since_return_s` ago (None: never returned)."""
        if since_return_s is None or since_return_s > self.rejoin_ms / 1000.0 * HOLD_RESET_FACTOR:
            return 1
        return strikes + 1

    def verdict(self, score_s: float, fastest: tuple[str, float] | None,
                margin: float = 1.0) -> str:
        """Why a member scoring `score_s` holds the group back ("" if it does not), against
        `fastest` (the fastest other in-sync member and its score; None: none). `margin`
        scales the score (REJOIN_MARGIN for the way back)."""
        if not self.enabled or fastest is None:
            return ""
        other, other_s = fastest
        if score_s <= other_s:
            return ""  # the fastest member: removing it would not speed up any put
        scaled_ms = score_s * margin * 1000.0
        seen = f"acks take {_ms(score_s)} (fastest member {other}: {_ms(other_s)})"
        if scaled_ms > self.max_latency_ms:
            return f"{seen}, over haMaxSlaveAckLatency={self.max_latency_ms} ms"
        if (self.ratio and scaled_ms > self.min_latency_ms
                and score_s * margin > self.ratio * other_s):
            times = score_s / other_s if other_s > 0 else float("inf")
            return (f"{seen}, {times:.0f}x slower: over haSlowSlaveLatencyRatio={self.ratio} "
                    f"and haSlowSlaveMinLatency={self.min_latency_ms} ms")
        return ""


class AppendTimes:
    """End offsets of the puts that waited for acks, with the time each began to wait, in
    offset order (see the module docstring). Plain lists with a moving head, so that a member
    far behind finds its entry from the left and one caught up by bisection."""

    __slots__ = ("_ends", "_times", "_head")

    def __init__(self) -> None:
        self._ends: list[int] = []
        self._times: list[float] = []
        self._head = 0

    def __len__(self) -> int:
        return len(self._ends) - self._head

    def add(self, end_offset: int, now: float) -> None:
        ends = self._ends
        if len(ends) > self._head:
            if end_offset <= ends[-1]:
                return  # a put that finished appending earlier told us later: covered
            if now - self._times[-1] < MARK_GRANULARITY_S:
                ends[-1] = end_offset  # same millisecond: one entry (its first put's time)
                return
        ends.append(end_offset)
        self._times.append(now)
        if len(self) > MAX_MARKS:
            self._head += 1
        self._compact()

    def first_after(self, offset: int) -> tuple[int, float] | None:
        """The oldest entry beyond `offset`: (its end, when it began to wait); None if there is
        none."""
        i = bisect.bisect_right(self._ends, offset, self._head)
        return (self._ends[i], self._times[i]) if i < len(self._ends) else None

    def drop_up_to(self, offset: int) -> None:
        """Forget the entries every connected slave acked (they end at or below `offset`)."""
        self._head = bisect.bisect_right(self._ends, offset, self._head)
        self._compact()

    def _compact(self) -> None:
        if self._head > 1024 and self._head * 2 > len(self._ends):
            del self._ends[:self._head]
            del self._times[:self._head]
            self._head = 0


class AckLatency:
    """One member's ack latency samples (time, seconds), newest last, kept for HORIZON windows
    at most."""

    __slots__ = ("_samples", "last_s")

    def __init__(self) -> None:
        self._samples: deque[tuple[float, float]] = deque(maxlen=MAX_SAMPLES)
        self.last_s = 0.0  # the newest sample (0 until one came)

    def add(self, now: float, latency_s: float) -> None:
        latency_s = max(0.0, latency_s)
        self._samples.append((now, latency_s))
        self.last_s = latency_s

    def recent(self, now: float, window_s: float) -> list[float]:
        """The samples of the last window_s, sorted; when there are fewer than MIN_SAMPLES,
        the newest MIN_SAMPLES of the horizon: a member so slow that few acks fit in a window
        (a second per ack) is judged by its last few acks, not by the gaps between them."""
        samples = self._samples
        while samples and samples[0][0] < now - window_s * HORIZON:
            samples.popleft()
        values = [latency for at, latency in samples if at >= now - window_s]
        if len(values) < MIN_SAMPLES:
            values = [latency for _, latency in itertools.islice(
                reversed(samples), MIN_SAMPLES)]
        return sorted(values)

    def score(self, now: float, window_s: float, pending_s: float) -> float:
        """The median of the recent samples, or the pending age when that is larger and at
        least a window long (a member that stopped acking). A shorter pending age is the
        wait of data in flight, which the samples will show once acked: counting it at the
        instant it is read would let one late ack (a pause of the collector, a slow fsync)
        reset the rejoin time of a member that is fast by every sample. With fewer than
        MIN_SAMPLES samples in the horizon only the pending age counts."""
        stuck = pending_s if pending_s >= window_s else 0.0
        values = self.recent(now, window_s)
        if len(values) < MIN_SAMPLES:
            return stuck
        return max(values[len(values) // 2], stuck)


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The value at `fraction` (0..1) of sorted values, nearest rank; 0 for none."""
    if not sorted_values:
        return 0.0
    rank = min(len(sorted_values) - 1, max(0, int(round(fraction * len(sorted_values))) - 1))
    return sorted_values[rank]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"

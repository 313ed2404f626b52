"""A slave that is alive but slow (gray failure): ack latencies, the slow-member rule, holding a
slow member out of the in-sync set and letting it back, on a manual clock without sleeping.

`GroupSim` plays a SYNC_MASTER group in memory: closed-loop producers (each puts again as soon
as its put is answered, as the issue's producers did), every slave acking each put after its
own delay, the master's housekeeping every 50 ms. Events run in time order on a ManualClock."""
from __future__ import annotations

import heapq
import itertools

import pytest

from common.clock import ManualClock
from common.config_values import ConfigError
from ha.ack_latency import AckLatency, AppendTimes, SlowRule, MAX_MARKS
from ha.ack_tracker import AckTracker
from store.put_result import PutStatus

PUT_BYTES = 1000
RULE = SlowRule()  # the defaults: 1000 ms bound, 4x and 50 ms floor, 1 s window, 5 s rejoin


class GroupSim:
    """A master's AckTracker fed by simulated producers and slaves (see the module doc).
    `delays[slave]` is how long that slave takes to ack a put (changeable while it runs;
    None: it stops acking)."""

    def __init__(self, slaves: dict[str, float | None], *, producers: int = 4,
                 rule: SlowRule = RULE, min_in_sync_replicas: int = 1) -> None:
        self.clock = ManualClock()
        self.tracker = AckTracker(self.clock, max_gap=256 << 20, max_catchup_ms=15_000,
                                  in_sync_replicas=1, min_in_sync_replicas=min_in_sync_replicas,
                                  all_ack=True, slow=rule)
        self.delays = dict(slaves)
        self.end = 0
        self.events: list = []
        self.seq = itertools.count()
        self.last_ack_at = {s: 0.0 for s in slaves}
        self.acked = 0   # puts answered PUT_OK
        self.refused = 0
        self.sets: list[frozenset[str]] = []  # the in-sync set after each change
        for s in slaves:
            self.tracker.connect(s, 0)
            self.tracker.on_transfer(s, 0)
            self.tracker.on_ack(s, 0, 0, 0)
        self.sets.append(self.tracker.in_sync_ids())
        self._at(0.0, "refresh", None)
        for p in range(producers):
            self._at(0.0, "put", p)

    @property
    def now(self) -> float:
        return self.clock.monotonic()

    def _at(self, delay: float, kind: str, data) -> None:
        heapq.heappush(self.events, (self.now + delay, next(self.seq), kind, data))

    def run(self, seconds: float) -> None:
        until = self.now + seconds
        while self.events and self.events[0][0] <= until:
            at, _, kind, data = heapq.heappop(self.events)
            self.clock.advance(max(0.0, at - self.now))
            getattr(self, f"_{kind}")(data)
            in_sync = self.tracker.in_sync_ids()
            if in_sync != self.sets[-1]:
                self.sets.append(in_sync)
        self.clock.advance(max(0.0, until - self.now))

    def _put(self, producer: int) -> None:
        if not self.tracker.enough_in_sync():
            self.refused += 1
            self._at(0.01, "put", producer)  # a refused client retries a little later
            return
        self.end += PUT_BYTES
        end = self.end
        for s, delay in self.delays.items():
            self.tracker.on_transfer(s, end)
            if delay is not None:
                ack_at = max(self.last_ack_at[s], self.now + delay)
                self.last_ack_at[s] = ack_at
                self._at(ack_at - self.now, "ack", (s, end))
        completion = self.tracker.wait(end, 3000)
        completion.add_callback(lambda status, p=producer: self._answered(p, status))

    def _answered(self, producer: int, status: PutStatus) -> None:
        if status is PutStatus.PUT_OK:
            self.acked += 1
        self._at(0.0, "put", producer)

    def _ack(self, data) -> None:
        slave, offset = data
        if self.delays.get(slave) is not None:
            self.tracker.on_ack(slave, offset, offset, self.end)

    def _refresh(self, _) -> None:
        self.tracker.refresh(self.end)
        self.tracker.expire()
        self._at(0.05, "refresh", None)

    def rate(self, seconds: float) -> float:
        """Puts acknowledged per second over the next `seconds`."""
        before = self.acked
        self.run(seconds)
        return (self.acked - before) / seconds

    def state(self, slave: str):
        return next(s for s in self.tracker.states(self.end) if s.slave_id == slave)


# -- the measures ---------------------------------------------------------------------------------
def test_append_times_find_the_oldest_waiting_data_and_forget_what_all_acked():
    marks = AppendTimes()
    marks.add(100, 1.0)
    marks.add(200, 1.0005)  # same millisecond: extends the entry, keeps its time
    marks.add(150, 1.2)     # told late by a put that appended earlier: covered already
    marks.add(300, 1.5)
    assert len(marks) == 2
    assert marks.first_after(0) == (200, 1.0)
    assert marks.first_after(200) == (300, 1.5)
    assert marks.first_after(300) is None
    marks.drop_up_to(200)
    assert marks.first_after(0) == (300, 1.5)


def test_append_times_keep_a_bounded_number_of_entries():
    marks = AppendTimes()
    for i in range(MAX_MARKS + 10):
        marks.add((i + 1) * 10, i * 0.01)
    assert len(marks) == MAX_MARKS
    assert marks.first_after(0) == (110, 0.1)  # the ten oldest went


def test_latency_score_is_the_window_median_or_the_pending_age():
    lat = AckLatency()
    assert lat.score(10.0, 1.0, 0.0) == 0.0
    lat.add(9.5, 0.2)
    lat.add(9.6, 0.4)
    assert lat.score(10.0, 1.0, 0.05) == 0.0   # two samples: not enough; pending not long
    assert lat.score(10.0, 1.0, 1.2) == 1.2    # pending longer than a window: stuck
    lat.add(9.7, 0.3)
    assert lat.score(10.0, 1.0, 0.05) == 0.3
    assert lat.score(10.0, 1.0, 0.9) == 0.3    # data in flight: the samples judge
    assert lat.score(10.0, 1.0, 1.5) == 1.5    # stopped acking: its pending age counts
    # Out of the window but the newest three of the horizon: a member so slow that a window
    # holds fewer acks is judged by its last ones...
    assert lat.score(12.0, 1.0, 0.0) == 0.3
    for i in range(5):
        lat.add(12.0 + i * 0.1, 0.01)
    assert lat.score(12.5, 1.0, 0.0) == 0.01   # ...and by the window's once there are enough
    assert lat.recent(12.5, 1.0) == [0.01] * 5
    assert lat.score(30.0, 1.0, 0.0) == 0.0    # past the horizon nothing counts


def test_the_rule():
    rule = SlowRule(max_latency_ms=1000, ratio=4, min_latency_ms=100)
    assert rule.verdict(0.25, None) == ""                      # alone: never slow
    assert rule.verdict(0.25, ("b", 0.3)) == ""                # the fastest: never slow
    assert "4x" not in rule.verdict(0.25, ("b", 0.005)) and "50x slower" in \
        rule.verdict(0.25, ("b", 0.005))
    assert rule.verdict(0.09, ("b", 0.001)) == ""              # under the floor
    assert rule.verdict(0.3, ("b", 0.1)) == ""                 # 3x: under the ratio
    assert "haMaxSlaveAckLatency=1000" in rule.verdict(1.5, ("b", 0.5))  # the absolute bound
    assert rule.verdict(0.06, ("b", 0.001)) == ""
    assert rule.verdict(0.06, ("b", 0.001), margin=2.0) != ""  # the way back has a margin
    assert SlowRule(max_latency_ms=0).verdict(5.0, ("b", 0.001)) == ""  # off
    assert SlowRule(ratio=0).verdict(0.5, ("b", 0.001)) == ""  # relative rule off
    with pytest.raises(ConfigError):
        SlowRule(window_ms=0)


def test_rejoin_time_doubles_for_repeated_removals_and_starts_afresh_later():
    rule = SlowRule(rejoin_ms=5000)
    assert [rule.hold_s(n) for n in (1, 2, 3, 4, 5)] == [5, 10, 20, 40, 40]
    assert rule.strikes_after(0, None) == 1
    assert rule.strikes_after(1, 12.0) == 2
    assert rule.strikes_after(3, 41.0) == 1


# -- the gray failure of issue 49 -----------------------------------------------------------------
def test_a_slow_slave_is_held_out_and_the_group_gets_its_rate_back():
    sim = GroupSim({"s1": 0.002, "s2": 0.002})
    before = sim.rate(5)
    sim.delays["s1"] = 0.25  # throttled: acks take 250 ms
    sim.run(0.5)
    slowed = sim.rate(1.0)
    assert slowed < before / 10  # all-ack: the whole group waits for it
    sim.run(3.5)  # within 5 s of the fault
    assert sim.tracker.in_sync_ids() == {"s2"}
    assert sim.rate(5) >= 0.8 * before
    st = sim.state("s1")
    assert st.held_out.startswith("acks take 250 ms (fastest member s2: 2.0 ms)")
    assert st.last_change.startswith("left: slow: acks take 250 ms")
    assert st.ack_latency_ms > 200
    assert sim.state("s2").ack_latency_ms < 5
    # the puts its acks released waited ~250 ms each: it was the one they waited for
    s2 = sim.state("s2")
    assert st.released_wait_ms / st.released_puts > 50 * s2.released_wait_ms / s2.released_puts
    print(f"\nrate before {before:.0f}/s, slowed {slowed:.0f}/s, s1 out after "
          f"{sim.state('s1').last_change_age_ms} ms ago")


def test_the_slow_slave_comes_back_once_fast_and_caught_up_without_flapping():
    sim = GroupSim({"s1": 0.01, "s2": 0.01}, producers=2)
    sim.run(2)
    sim.delays["s1"] = 0.25
    sim.run(20)
    assert sim.tracker.in_sync_ids() == {"s2"}
    sim.delays["s1"] = 0.012  # released
    sim.run(RULE.rejoin_ms / 1000 - 1)
    assert sim.tracker.in_sync_ids() == {"s2"}  # not yet: it must stay fast for a while
    sim.run(3)
    assert sim.tracker.in_sync_ids() == {"s1", "s2"}
    assert sim.sets == [{"s1", "s2"}, {"s2"}, {"s1", "s2"}]  # two changes for one fault
    st = sim.state("s1")
    assert st.in_sync_changes == 3  # the first join, out, back
    assert st.last_change.startswith("joined: fast again for 5 s")


def test_a_slave_that_is_slow_again_at_once_waits_longer_each_time():
    sim = GroupSim({"s1": 0.01, "s2": 0.01}, producers=2)
    sim.run(1)
    sim.delays["s1"] = 0.25
    sim.run(3)
    assert "s1" not in sim.tracker.in_sync_ids()
    out_at = sim.now
    # While out, nothing waits for it: it keeps up with acks of 250 ms, which is still slow.
    sim.run(30)
    assert "s1" not in sim.tracker.in_sync_ids()
    sim.delays["s1"] = 0.012
    sim.run(6)
    assert "s1" in sim.tracker.in_sync_ids()
    back_at = sim.now
    sim.delays["s1"] = 0.25
    sim.run(3)
    assert "s1" not in sim.tracker.in_sync_ids()
    sim.delays["s1"] = 0.012
    sim.run(6)
    assert "s1" not in sim.tracker.in_sync_ids()  # second removal within the reset: 10 s now
    sim.run(5)
    assert "s1" in sim.tracker.in_sync_ids()
    assert out_at < back_at


def test_a_loaded_but_healthy_group_keeps_every_member():
    # Both slaves slowish and unequal (25 and 8 ms: 3x) with a spike now and then: under the
    # 50 ms floor and the ratio, nobody is removed.
    sim = GroupSim({"s1": 0.025, "s2": 0.008})
    for _ in range(20):
        sim.run(1)
        sim.delays["s1"] = 0.15 if sim.delays["s1"] == 0.025 else 0.025  # a 150 ms blip
        sim.run(0.05)
        sim.delays["s1"] = 0.025
    assert sim.sets == [{"s1", "s2"}]


def test_the_only_slave_is_never_removed_for_being_slow():
    sim = GroupSim({"s1": 0.002})
    sim.run(1)
    sim.delays["s1"] = 1.5  # over the absolute bound too
    sim.run(10)
    assert sim.tracker.in_sync_ids() == {"s1"}


def test_a_slow_master_slows_every_member_alike_and_nobody_is_removed():
    sim = GroupSim({"s1": 0.002, "s2": 0.002, "s3": 0.002})
    sim.run(1)
    for s in sim.delays:
        sim.delays[s] = 0.3  # the master's own slowness shows in every member's acks
    sim.run(10)
    assert sim.sets == [{"s1", "s2", "s3"}]


def test_the_absolute_bound_removes_a_member_under_the_ratio():
    sim = GroupSim({"s1": 0.4, "s2": 1.3})  # 3.25x: under the ratio, over 1000 ms
    sim.run(6)
    assert sim.tracker.in_sync_ids() == {"s1"}
    assert "haMaxSlaveAckLatency=1000" in sim.state("s2").held_out


def test_a_member_that_stops_acking_is_slow_by_its_pending_age():
    sim = GroupSim({"s1": 0.002, "s2": 0.002})
    sim.run(1)
    sim.delays["s1"] = None  # connected, silent (haMaxTimeSlaveNotCatchup is 15 s)
    sim.run(3)
    assert sim.tracker.in_sync_ids() == {"s2"}
    assert "over haMaxSlaveAckLatency" in sim.state("s1").held_out


def test_detection_off_keeps_the_slow_member_and_the_group_slow():
    sim = GroupSim({"s1": 0.002, "s2": 0.002}, rule=SlowRule(max_latency_ms=0))
    before = sim.rate(3)
    sim.delays["s1"] = 0.25
    sim.run(5)
    assert sim.tracker.in_sync_ids() == {"s1", "s2"}
    assert sim.rate(5) < before / 10


def test_with_min_in_sync_replicas_the_group_size_writes_are_refused_naming_the_slow_member():
    sim = GroupSim({"s1": 0.002, "s2": 0.002}, min_in_sync_replicas=3)
    sim.run(1)
    sim.delays["s1"] = 0.25
    sim.run(4)
    assert not sim.tracker.enough_in_sync()
    note = sim.tracker.out_of_sync_note()
    assert note.startswith("; out: s1 (slow: acks take 250 ms")
    acked = sim.acked
    sim.run(2)
    assert sim.acked == acked and sim.refused > 0  # refused, never acknowledged with fewer


def test_a_held_out_member_stays_out_across_a_reconnect():
    sim = GroupSim({"s1": 0.002, "s2": 0.002})
    sim.run(1)
    sim.delays["s1"] = 0.25
    sim.run(3)
    assert "s1" not in sim.tracker.in_sync_ids()
    sim.tracker.disconnect("s1")
    sim.tracker.connect("s1", sim.end)
    sim.tracker.on_transfer("s1", sim.end)
    sim.tracker.on_ack("s1", sim.end, sim.end, sim.end)  # caught up, but still held out
    assert "s1" not in sim.tracker.in_sync_ids()
    assert sim.state("s1").held_out


def test_member_notes_tell_the_controller_why():
    sim = GroupSim({"s1": 0.002, "s2": 0.002})
    sim.run(1)
    sim.delays["s1"] = 0.25
    sim.run(3)
    notes = sim.tracker.member_notes()
    assert notes["s1"].startswith("left: slow: acks take 250 ms")
    assert notes["s2"] == "joined: caught up"


def test_puts_that_need_no_wait_leave_no_marks():
    clock = ManualClock()
    t = AckTracker(clock, max_gap=1 << 20, max_catchup_ms=15_000, in_sync_replicas=1,
                   min_in_sync_replicas=1, all_ack=True)
    t.connect("s1", 0)
    t.on_transfer("s1", 100)
    t.on_ack("s1", 100, 100, 100)
    assert t.wait(100, 1000).value is PutStatus.PUT_OK
    clock.advance(5)
    assert t.states(100)[0].pending_ms == 0
    t.wait(200, 1000)
    clock.advance(0.5)
    assert t.states(200)[0].pending_ms == pytest.approx(500)
    t.on_ack("s1", 200, 200, 200)
    assert t.states(200)[0].pending_ms == 0

"""The console's trends in memory (cluster/console/trends.py): counter rates across restarts
and failovers, the sampler's ring stepped with a ManualClock, the highlights, and the API's
columns. The controller's state is a real ControllerService (a state file in tmp_path) fed
heartbeats; the sampler reads it as on a controller."""
from __future__ import annotations

import json
from types import MappingProxyType

import pytest

from common.clock import ManualClock
from cluster.console import trends
from cluster.console.trends import (CounterRates, GroupReading, NodeReading, Sample,
                                    TrendSampler, controller_readings)
from cluster.controller.controller_service import ControllerService, FileStateStore
from cluster.controller.election import ElectionConfig, NodeReport
from cluster.controller.node_load import NodeLoad

CONFIG = ElectionConfig(failover_timeout_ms=3000, lease_ms=2000, settle_ms=0)
M, S1, S2 = "g:0", "g:1", "g:2"
ADDR = {M: "127.0.0.1:1", S1: "127.0.0.1:2", S2: "127.0.0.1:3"}


def load(sent: int = 0, delivered: int = 0, lag: dict | None = None, started: int = 1,
         disk: float = 0.3) -> NodeLoad:
    return NodeLoad(started_ms=started, sent_messages=sent, delivered_messages=delivered,
                    consumer_lag=None if lag is None else MappingProxyType(lag),
                    disk_used_ratio=disk, disk_warning_ratio=0.9, disk_max_used_ratio=0.75)


# -- counter rates -----------------------------------------------------------------------------
def test_a_rate_is_the_increase_over_the_time_between_two_reports():
    r = CounterRates()
    assert r.rate(("n", "sent"), 1, 100, 10.0) is None  # first sight: no rate yet
    assert r.rate(("n", "sent"), 1, 150, 15.0) == 10.0
    assert r.rate(("n", "sent"), 1, 150, 15.0) is None  # the same report again: nothing new
    assert r.rate(("n", "sent"), 1, 150, 20.0) == 0.0


def test_a_counter_that_goes_down_is_a_restart_not_a_negative_rate():
    r = CounterRates()
    r.rate(("n", "sent"), 1, 1000, 10.0)
    assert r.rate(("n", "sent"), 1, 40, 15.0) == 8.0  # counted from 0 since the restart


def test_a_new_process_start_is_a_restart_even_when_the_counter_is_higher():
    r = CounterRates()
    r.rate(("n", "sent"), 1, 10, 10.0)
    assert r.rate(("n", "sent"), 2, 60, 15.0) == 12.0  # 60 since the restart, not 50


def test_a_negative_counter_is_refused():
    with pytest.raises(ValueError, match="negative"):
        CounterRates().rate(("n", "sent"), 1, -1, 1.0)


# -- the sampler ------------------------------------------------------------------------------
class Source:
    """Readings a test sets by hand."""

    def __init__(self) -> None:
        self.groups: list[GroupReading] = []

    def __call__(self) -> list[GroupReading]:
        return self.groups


def reading(group: str, master: str, *nodes: tuple[str, float, NodeLoad]) -> GroupReading:
    return GroupReading(group, master, tuple(NodeReading(n, at, ld) for n, at, ld in nodes))


def test_the_ring_keeps_the_last_window_of_samples():
    clock, source = ManualClock(), Source()
    sampler = TrendSampler(source, clock, interval_s=5, window_s=60)
    assert sampler.capacity == 12 and sampler.wait_interval() == 5
    for i in range(20):
        source.groups = [reading("a", M, (M, clock.monotonic(), load(sent=100 * i)))]
        sampler.step()
        clock.advance(5)
    samples = sampler.series()["a"]
    assert len(samples) == 12
    assert [s.at_ms for s in samples] == sorted(s.at_ms for s in samples)
    assert all(s.produce == 20.0 for s in samples)  # 100 messages per 5 s


def test_rates_sum_the_nodes_of_a_group_across_a_failover_and_groups_are_apart():
    clock, source = ManualClock(), Source()
    sampler = TrendSampler(source, clock)
    t = clock.monotonic()
    source.groups = [reading("a", M, (M, t, load(sent=100)), (S1, t, load(sent=0))),
                     reading("b", "b:0", ("b:0", t, load(sent=7)))]
    sampler.step()
    clock.advance(5)
    t += 5
    # M stored 50 more before it died; S1, master now, stored 25 (the same 5 s)
    source.groups = [reading("a", S1, (M, t, load(sent=150)), (S1, t, load(sent=25))),
                     reading("b", "b:0", ("b:0", t, load(sent=7)))]
    sampler.step()
    a, b = sampler.series()["a"], sampler.series()["b"]
    assert a[0].produce is None and a[1].produce == 15.0 and a[1].master_id == S1
    assert b[1].produce == 0.0


def test_a_restarted_master_gives_a_rate_from_zero_not_a_negative_one():
    clock, source = ManualClock(), Source()
    sampler = TrendSampler(source, clock)
    source.groups = [reading("a", M, (M, clock.monotonic(), load(sent=5000, delivered=400)))]
    sampler.step()
    clock.advance(5)
    source.groups = [reading("a", M, (M, clock.monotonic(),
                                      load(sent=30, delivered=10, started=2)))]
    sampler.step()
    last = sampler.series()["a"][-1]
    assert last.produce == 6.0 and last.consume == 2.0


def test_the_lag_is_the_masters_and_unknown_while_it_does_not_know_it():
    clock, source = ManualClock(), Source()
    sampler = TrendSampler(source, clock)
    t = clock.monotonic()
    source.groups = [reading("a", M, (M, t, load(lag={"cg": 4, "other": 1})),
                             (S1, t, load()))]
    sampler.step()
    source.groups = [reading("a", S1, (M, t, load(lag={"cg": 4})), (S1, t + 1, load()))]
    sampler.step()
    first, second = sampler.series()["a"]
    assert first.total_lag == 5 and first.lag == {"cg": 4, "other": 1}
    assert second.lag is None and second.total_lag is None


def test_bad_sampler_settings_are_refused():
    with pytest.raises(ValueError, match="interval_s"):
        TrendSampler(Source(), ManualClock(), interval_s=0)
    with pytest.raises(ValueError, match="interval_s"):
        TrendSampler(Source(), ManualClock(), interval_s=10, window_s=5)


# -- on a controller's state ------------------------------------------------------------------
class Controller:
    """A real ControllerService on a ManualClock, fed heartbeats by hand."""

    def __init__(self, tmp_path, config: ElectionConfig = CONFIG) -> None:
        self.clock = ManualClock()
        self.service = ControllerService(FileStateStore(str(tmp_path / "controller.json")),
                                         config, self.clock)

    def hb(self, node: str, group: str = "g", **kw):
        return self.service.heartbeat(group, NodeReport(node_id=node, address=ADDR[node], **kw))

    def running(self, **master_kw) -> "Controller":
        self.hb(M, role="TRANSITIONING", preferred_role="SYNC_MASTER")
        self.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S1, S2}), **master_kw)
        self.hb(S1, role="SLAVE", epoch=1, load=load())
        self.hb(S2, role="SLAVE", epoch=1, load=load())
        return self

    def found(self, series=None) -> list[trends.Highlight]:
        return trends.highlights(self.service.snapshots(), series or {}, 3.0)


def test_the_sampler_reads_the_controllers_groups(tmp_path):
    c = Controller(tmp_path).running(load=load(sent=10, lag={"cg": 3}))
    sampler = TrendSampler(controller_readings(c.service, c.clock), c.clock)
    sampler.step()
    c.clock.advance(5)
    c.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S1, S2}),
         load=load(sent=60, delivered=20, lag={"cg": 33}))
    sampler.step()
    last = sampler.series()["g"][-1]
    assert last.produce == 10.0 and last.consume == 4.0 and last.lag == {"cg": 33}
    assert last.master_id == M and last.at_ms == c.clock.now_ms()


def test_a_healthy_group_needs_no_attention(tmp_path):
    c = Controller(tmp_path).running(load=load())
    assert c.found() == []


def test_a_group_without_a_master_is_critical(tmp_path):
    c = Controller(tmp_path, ElectionConfig(settle_ms=3000))
    c.hb(M, role="TRANSITIONING", epoch=3, max_offset=5)  # a store with data: the settle window waits for others
    found = c.found()
    assert [(h.level, h.kind) for h in found] == [("critical", "no_master")]
    assert "waiting" in found[0].reason


def test_a_slave_that_left_the_sync_state_set_says_why(tmp_path):
    c = Controller(tmp_path).running(load=load())
    c.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S1}),
         member_notes=MappingProxyType({S2: "left: disconnected: stream closed"}), load=load())
    found = c.found()
    assert [(h.kind, h.node) for h in found] == [("out_of_sync_set", S2)]
    assert "disconnected: stream closed" in found[0].reason


def test_a_member_the_master_finds_out_of_sync_is_a_warning(tmp_path):
    c = Controller(tmp_path).running(load=load())
    # a SYNC_MASTER whose minInSyncReplicas keeps the set: S2 stays a member, out of sync
    c.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S1}), min_in_sync_replicas=3,
         member_notes=MappingProxyType({S2: "left: lagging: 3 s behind"}), load=load())
    found = c.found()
    assert [(h.level, h.kind, h.node) for h in found] == [("warning", "out_of_sync", S2)]
    assert found[0].reason == "the master finds it out of sync: left: lagging: 3 s behind"


def test_silent_and_unhealthy_nodes(tmp_path):
    c = Controller(tmp_path).running(load=load())
    c.clock.advance(2)
    c.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S1, S2}), load=load(),
         healthy=False, unhealthy_reason="flush failed")
    c.hb(S1, role="SLAVE", epoch=1, load=load())
    c.clock.advance(2)  # S2 silent for 4 s, past the 3 s failover timeout
    found = {(h.level, h.kind, h.node): h.reason for h in c.found()}
    assert found == {("critical", "unhealthy", M): "flush failed",
                     ("warning", "silent", S2): "no heartbeat for 4 s"}


def test_disk_above_its_ratios(tmp_path):
    c = Controller(tmp_path).running(load=load(disk=0.93))
    c.hb(S1, role="SLAVE", epoch=1, load=load(disk=0.8))
    found = c.found()
    assert [(h.level, h.kind, h.node) for h in found] == [("critical", "disk", M),
                                                         ("warning", "disk", S1)]
    assert "93% used" in found[0].reason and "diskSpaceWarningLevelRatio 90%" in found[0].reason


# -- lag that keeps growing -------------------------------------------------------------------
def samples(*lags) -> list[Sample]:
    return [Sample(1000 * 5 * i, M, None, None, None if lag is None else {"cg": lag})
            for i, lag in enumerate(lags)]


def test_a_lag_that_rose_at_every_one_of_the_last_samples_is_growing():
    found = trends.lag_highlights("g", samples(0, 5, 10, 20, 40, 105), 5)
    assert [(h.kind, h.consumer_group) for h in found] == [("lag_growing", "cg")]
    assert found[0].reason == "lag rose 4 times in a row over 20 s: 5 -> 105 (+5.0/s)"


@pytest.mark.parametrize("lags", [(5, 10, 10, 20, 140),  # one flat step
                                  (5, 10, 20, 40, 104),  # 99 more in all: a wobble
                                  (5, 10, 20, 400),  # too few samples
                                  (5, None, 20, 40, 400),  # unknown in between
                                  (800, 400, 200, 100, 5)])
def test_a_lag_that_did_not_rise_every_time_is_not_growing(lags):
    assert trends.lag_highlights("g", samples(*lags), 5) == []


def test_growing_needs_at_least_two_samples():
    with pytest.raises(ValueError, match="growing_samples"):
        trends.lag_highlights("g", samples(1, 2), 1)


# -- the API's columns ------------------------------------------------------------------------
def test_the_series_json_is_columns_and_master_changes():
    s = [Sample(1000, M, None, None, None), Sample(6000, M, 12.345, 3.0, {"cg": 4}),
         Sample(11000, S1, 2.0, 0.0, {"cg": 5, "x": 1})]
    out = trends.series_json("g", s)
    assert out == {"group": "g", "at_ms": [1000, 6000, 11000],
                   "produce_per_s": [None, 12.3, 2.0], "consume_per_s": [None, 3.0, 0.0],
                   "lag": [None, 4, 6], "consumer_lag": {"cg": [None, 4, 5],
                                                          "x": [None, None, 1]},
                   "masters": [[1000, M], [11000, S1]]}
    json.dumps(out)


def test_a_full_window_answers_in_a_few_kilobytes():
    """180 samples of one group with two consumer groups: what the page fetches every 5 s."""
    s = [Sample(1_700_000_000_000 + 5000 * i, "broker-a:0", 1234.5, 1200.25,
                {"orders": 100000 + i, "audit": 5 + i}) for i in range(180)]
    size = len(json.dumps(trends.series_json("broker-a", s)))
    assert 5_000 < size < 15_000

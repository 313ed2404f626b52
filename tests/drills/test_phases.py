"""The write rate and p99 before, during and after a fault (phases.py), the checker's rate
target, and their rendering, over hand-built histories."""
from __future__ import annotations

import dataclasses

import pytest

from cluster.drills.checker import check
from cluster.drills.history import History
from cluster.drills.phases import fault_phases
from cluster.drills.report import phase_rows, render_phases
from tests.drills.builders import EXPECT, FAILED, receive, send


def steady(h: History, start: float, end: float, per_s: int, latency: float,
           prefix: str) -> None:
    """`per_s` acknowledged sends a second from start to end, each taking `latency`."""
    n = int((end - start) * per_s)
    for i in range(n):
        at = start + i / per_s
        key = f"{prefix}{i}"
        send(h, key, started=at, finished=at + latency)
        receive(h, key, at=at + latency + 0.01)


def slowed_history(during_per_s: int) -> History:
    """100/s at 10 ms for 20 s; a fault at 20 s healed at 50 s: 5 s at 10/s and 400 ms, then
    `during_per_s` at 20 ms; 100/s at 10 ms after."""
    h = History()
    steady(h, 0, 20, 100, 0.01, "a")
    steady(h, 20, 25, 10, 0.4, "b")
    steady(h, 25, 50, during_per_s, 0.02, "c")
    steady(h, 50, 60, 100, 0.01, "d")
    i = h.fault_started("slave1 slow", at=20.0)
    h.fault_healed(i, at=50.0)
    return h


def test_windows_rates_and_p99():
    h = slowed_history(during_per_s=90)
    [fp] = fault_phases(h.sends(), h.faults(), grace_s=5, before_s=10)
    by = {p.name: p for p in fp.phases}
    assert [p.name for p in fp.phases] == ["before", "detecting", "during", "after"]
    assert (by["before"].start_s, by["before"].end_s) == (-10, 0)
    assert by["before"].rate == pytest.approx(100, abs=1)
    assert by["before"].p99_ms == pytest.approx(10)
    assert by["detecting"].p99_ms == pytest.approx(400)
    assert by["during"].rate == pytest.approx(90, abs=1)
    assert by["during"].p99_ms == pytest.approx(20)
    assert by["after"].rate == pytest.approx(100, abs=2)
    assert fp.rate_ratio == pytest.approx(0.9, abs=0.02)
    assert fp.p99_ratio == pytest.approx(2.0)


def test_not_acknowledged_sends_are_counted_per_window():
    h = slowed_history(during_per_s=90)
    send(h, "refused", FAILED, started=30.0)
    [fp] = fault_phases(h.sends(), h.faults())
    assert fp.get("during").not_ok == 1 and fp.get("before").not_ok == 0


def test_the_rate_target_passes_and_fails():
    expect = dataclasses.replace(EXPECT, min_rate_ratio=0.8)
    assert check(slowed_history(during_per_s=90), expect).passed
    slow = check(slowed_history(during_per_s=20), expect)
    assert not slow.passed
    assert slow.failures == ("write rate during slave1 slow: 20/s, 0.20x the 100/s before "
                             "(wanted >= 0.8x)",)
    assert check(slowed_history(during_per_s=20), EXPECT).passed  # not judged by default


def test_a_fault_shorter_than_the_grace_has_no_during_window():
    h = History()
    steady(h, 0, 10, 10, 0.01, "a")
    i = h.fault_started("blip", at=5.0)
    h.fault_healed(i, at=7.0)
    [fp] = fault_phases(h.sends(), h.faults(), grace_s=5)
    assert [p.name for p in fp.phases] == ["before", "detecting", "after"]
    assert fp.rate_ratio is None
    r = check(h, dataclasses.replace(EXPECT, min_rate_ratio=0.8))
    assert r.failures == ("no write rate to compare before and during blip",)


def test_rendering():
    r = check(slowed_history(during_per_s=90), EXPECT)
    rows = phase_rows(r.phases[0])
    assert rows[0] == {"window": "before [-10, +0) s", "seconds": "10.0", "acked/s": "100",
                       "p99 ms": "10.0", "not acked": "0"}
    text = render_phases("slow-slave", r)
    assert text.splitlines()[0] == ("slow-slave: slave1 slow (rate during/before 0.90x, "
                                    "p99 during/before 2.00x)")
    assert "during [+5, +30) s" in text

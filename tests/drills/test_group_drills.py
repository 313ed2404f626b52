"""Drills on two broker groups under one controller (`drill NAME --groups 2`): real processes
killed by pid, the project's own producers (RoutedProducer) and the official client's, load on
both groups, the fault in broker-a. broker-b must not see a failed send, and the sends broker-a
refused must land in broker-b's queues within the client's retry."""
from __future__ import annotations

import dataclasses
import os

import pytest

from cluster.drills.history import History, SendOutcome
from cluster.drills.runner import DrillOptions, NotTargetable, run_drill
from cluster.drills.scenarios import DRILLS, Timing
from cluster.drills.workload import WorkloadConfig
from cluster.assembly.local_cluster import free_base_port

SHORT = Timing(warmup_s=3.0, fault_s=6.0, after_s=4.0)
LIGHT = WorkloadConfig(producers=2, rate=40.0, official_producers=2)

pytestmark = pytest.mark.timeout(300)


def test_kill_master_in_one_of_two_groups(tmp_path):
    run = run_drill(DRILLS["kill-master"], DrillOptions(
        root=str(tmp_path / "kill-master"), base_port=free_base_port(2), timing=SHORT,
        workload=LIGHT, groups=2))
    assert os.path.exists(run.history_path)
    r = run.result
    assert r.passed, (r.failures, run.notes)
    assert not r.lost and not r.phantom and r.stored_duplicates == 0
    assert r.fault_group == "broker-a"
    a, b = r.per_group["broker-a"], r.per_group["broker-b"]
    assert b.failed == b.unknown == b.moved_away == 0, b
    assert a.acked > 50 and b.acked > 50, r.per_group  # the load spread over both groups
    history = History.load(run.history_path)
    fault = history.faults()[0]
    sends = history.sends()
    for client in ("own", "official"):
        stored = {s.group for s in sends if s.client == client and s.outcome is SendOutcome.OK}
        assert stored == {"broker-a", "broker-b"}, (client, stored)
    # While broker-a had no master, the own producers' sends it refused went to broker-b
    # within the same send (RoutedProducer's retry on the next queue).
    moved = [s for s in sends if s.refused_groups() == ("broker-a",)]
    assert moved and all(s.group == "broker-b" and s.outcome is SendOutcome.OK for s in moved)
    assert all(s.finished - s.started < LIGHT.send_timeout * 3 for s in moved)
    # The own client never resends a send of unknown outcome to another group: none of its
    # messages is in two groups (the official client's may be: see the checker).
    brokers_of: dict[str, set[str]] = {}
    for rec in history.receives():
        if rec.key and not rec.key.startswith("o") and rec.broker:
            brokers_of.setdefault(rec.key, set()).add(rec.broker)
    assert all(len(b) == 1 for b in brokers_of.values())
    during = [s for s in sends if fault.started <= s.started < fault.healed
              and s.outcome is SendOutcome.OK]
    assert any(s.group == "broker-b" for s in during), "broker-b kept acknowledging"
    # Each group's consumers read only their own group's queues.
    assert {rec.broker for rec in history.receives() if rec.broker} == {"broker-a", "broker-b"}


def test_a_drill_without_group_support_is_refused(tmp_path):
    with pytest.raises(NotTargetable, match="does not run with several broker groups"):
        run_drill(DRILLS["restart-all"], DrillOptions(root=str(tmp_path / "r"), base_port=1,
                                                      groups=2))


def test_groups_must_be_positive():
    with pytest.raises(ValueError, match="groups"):
        DrillOptions(root="r", base_port=1, groups=0)

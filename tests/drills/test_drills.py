"""Failover drills end to end: real controller and node processes killed and paused by pid, real
producers and consumers over the RocketMQ 5 protocol, the checker's verdict. CI runs
kill-master, pause-master and the metadata drill, and the lagging-slave drill with and without
unclean elections: with them allowed the checker must count acknowledged messages lost, which
shows that the drills can fail."""
from __future__ import annotations

import os

import pytest

from cluster.drills.runner import DrillOptions, run_drill
from cluster.drills.scenarios import DRILLS, Timing
from cluster.drills.workload import WorkloadConfig
from cluster.assembly.local_cluster import free_base_port

SHORT = Timing(warmup_s=3.0, fault_s=6.0, after_s=4.0)
LIGHT = WorkloadConfig(producers=2, rate=40.0)

pytestmark = pytest.mark.timeout(300)


def drill(tmp_path, name: str, **options):
    run = run_drill(DRILLS[name], DrillOptions(
        root=str(tmp_path / name), base_port=free_base_port(), timing=SHORT, workload=LIGHT,
        **options))
    assert os.path.exists(run.history_path)
    return run


def assert_clean(run) -> None:
    r = run.result
    assert r.passed, (r.failures, run.notes)
    assert not r.lost and not r.phantom and not r.order_violations
    assert r.sends_ok > 100 and r.received > 100  # the load ran through the drill


def test_kill_master(tmp_path):
    run = drill(tmp_path, "kill-master")
    assert_clean(run)
    assert run.result.recovery_s[0] is not None
    assert any("became master" in note for note in run.notes)


def test_pause_master(tmp_path):
    run = drill(tmp_path, "pause-master")
    assert_clean(run)


def test_metadata_drill_keeps_eight_queues_through_two_failovers(tmp_path):
    run = drill(tmp_path, "metadata")
    assert_clean(run)
    assert len(run.result.recovery_s) == 2
    assert sum("has 8 queues" in note for note in run.notes) == 3


def test_lagging_slave_leaves_the_group_unavailable_not_lossy(tmp_path):
    run = drill(tmp_path, "lagging-slave")
    assert_clean(run)
    assert any("after the kill: none" in note for note in run.notes)


def test_with_unclean_election_the_checker_counts_the_loss(tmp_path):
    run = drill(tmp_path, "lagging-slave",
                controller_props={"enableElectUncleanMaster": "true"})
    r = run.result
    assert not r.passed
    assert r.lost, r.failures  # acknowledged by the master alone, gone with the unclean election
    assert any("acknowledged while it should be unavailable" in f for f in r.failures)

"""Failover drills end to end: real controller and node processes killed and paused by pid, real
producers and consumers over the RocketMQ 5 protocol, the checker's verdict. CI runs
kill-master, pause-master and the metadata drill, and the lagging-slave drill with and without
unclean elections: with them allowed the checker must count acknowledged messages lost, which
shows that the drills can fail."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys

import psutil
import pytest

from cluster.drills.history import History, SendOutcome
from cluster.drills.runner import DrillOptions, run_drill
from cluster.drills.scenarios import DRILLS, Timing
from cluster.drills.workload import WorkloadConfig
from cluster.assembly.local_cluster import free_base_port
from tests.support.waiting import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHORT = Timing(warmup_s=3.0, fault_s=6.0, after_s=4.0)
LIGHT = WorkloadConfig(producers=2, rate=40.0)

pytestmark = pytest.mark.timeout(300)


def drill(tmp_path, name: str, workload: WorkloadConfig = LIGHT, **options):
    run = run_drill(DRILLS[name], DrillOptions(
        root=str(tmp_path / name), base_port=free_base_port(), timing=SHORT, workload=workload,
        **options))
    assert os.path.exists(run.history_path)
    return run


def assert_clean(run) -> None:
    r = run.result
    assert r.passed, (r.failures, run.notes)
    assert not r.lost and not r.phantom and not r.order_violations
    assert r.sends_ok > 100 and r.received > 100  # the load ran through the drill


def test_kill_master(tmp_path):
    """Also with two producers and a consumer of the official client, given every node's
    address: once the new master is in place, the client's sends go through, i.e. its channel
    left the dead master for a live node (a route listing the master alone kept it there until
    the route refresh, 30 s; gaps of 6-14 s were measured), and its consumer group receives
    every acknowledged message."""
    run = drill(tmp_path, "kill-master",
                workload=dataclasses.replace(LIGHT, official_producers=2, official_consumers=1))
    assert_clean(run)
    r = run.result
    assert r.recovery_s[0] is not None
    assert any("became master" in note for note in run.notes)
    history = History.load(run.history_path)
    fault = history.faults()[0]
    official = [s for s in history.sends() if s.client == "official"]
    assert sum(s.outcome is SendOutcome.OK for s in official) > 100, "the official client ran"
    assert r.client_gaps["official"][0] is not None
    assert r.client_gaps["official consumers"][0] is not None
    assert any(rec.group.endswith("-official") for rec in history.receives())
    # A margin of a second for the nodes to learn of the election (500 ms heartbeats).
    stuck = [s for s in official if s.started > fault.healed + 1.0
             and s.outcome is not SendOutcome.OK]
    assert not stuck, f"{len(stuck)} official sends failed after the new master: {stuck[0].detail}"


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


def test_lost_answers_retried_by_the_official_client_are_stored_once(tmp_path):
    """One stored send in 25 is answered as if its answer was lost, and the master is killed
    once: the official client retries with the same message id and the duplicate window
    answers with the first receipt (the new master's window rebuilt from its own log)."""
    run = drill(tmp_path, "lost-answers")
    assert_clean(run)
    assert run.result.stored_duplicates == 0
    logs = [os.path.join(os.path.dirname(run.history_path), f"{n}.log")
            for n in ("master", "slave1", "slave2")]
    fired = sum(open(p, encoding="utf-8").read().count("drop_answer: firing") for p in logs)
    assert fired > 10, "the failpoint dropped answers"


def test_without_the_duplicate_window_the_checker_counts_retries_stored_twice(tmp_path):
    run = drill(tmp_path, "lost-answers", node_props={"duplicateWindowSeconds": "0"})
    r = run.result
    assert r.stored_duplicates > 0 and not r.passed
    assert any("duplicates stored" in f for f in r.failures)
    assert not r.lost and not r.phantom


def test_a_drill_stopped_by_sigterm_takes_its_cluster_down(tmp_path):
    """`timeout`, a cancelled job or kill send SIGTERM: the drill unwinds as on Ctrl-C and no
    node or controller process it started outlives it (they did: a soak stopped this way left
    its controller, three nodes and a conversion worker running)."""
    drill = subprocess.Popen([sys.executable, "-m", "cluster", "drill", "kill-master",
                              "--dir", str(tmp_path)], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    started: list[psutil.Process] = []
    try:
        def cluster_up() -> bool:
            started[:] = [p for p in psutil.Process(drill.pid).children(recursive=True)
                          if "node" in p.cmdline() or "controller" in p.cmdline()]
            return len(started) >= 4  # the controller and three nodes
        wait_until(cluster_up, 60, "the drill's controller and nodes")
        drill.send_signal(signal.SIGTERM)
        assert drill.wait(60) == 128 + signal.SIGTERM
        gone, alive = psutil.wait_procs(started, timeout=30)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        if drill.poll() is None:
            os.killpg(drill.pid, signal.SIGKILL)
            drill.wait()
        for p in started:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()

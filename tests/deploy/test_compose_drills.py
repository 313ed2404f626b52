"""Failover drills against the compose cluster (deploy/docker-compose.yml): one project of its own
for the module, brought up once, then kill-master, pause-master, kill-controller and the gray
failure slow-slave (a container's CPU quota, `docker update --cpus`) played against its
containers through `run_drill` with the short timings of tests/drills, and kill-master with
the load on both broker groups (`--groups 2`), each checked (passed, nothing lost, no
phantom); `down -v` at the end whatever happened.

Skipped without Docker or with the cluster's host ports taken (a compose cluster or
`cluster local` running).
"""
from __future__ import annotations

import os

import pytest

from cluster.drills.compose_cluster import ComposeCluster, ComposeProject
from cluster.drills.runner import DrillOptions, run_drill
from cluster.drills.scenarios import DRILLS, Timing
from cluster.drills.workload import WorkloadConfig
from tests.deploy.compose_support import build_images, skip_reason

SHORT = Timing(warmup_s=3.0, fault_s=6.0, after_s=4.0)
GRAY = Timing(warmup_s=3.0, after_s=3.0, gray_before_s=6.0, gray_fault_s=15.0, gray_after_s=5.0)
LIGHT = WorkloadConfig(producers=2, rate=40.0)

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def project():
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    build_images()
    p = ComposeProject(f"rmqstoredrills{os.getpid()}")
    try:
        p.up()
        yield p
    finally:
        p.down()


def drill(project: ComposeProject, tmp_path, name: str, timing: Timing = SHORT):
    run = run_drill(DRILLS[name], DrillOptions(root=str(tmp_path / name), base_port=0,
                                               timing=timing, workload=LIGHT, compose=project))
    r = run.result
    assert r.passed, (r.failures, run.notes)
    assert not r.lost and not r.phantom and not r.order_violations
    assert r.sends_ok > 100 and r.received > 100  # the load ran through the drill
    return run


def test_kill_master_container(project, tmp_path):
    run = drill(project, tmp_path, "kill-master")
    assert any("became master" in note for note in run.notes)


def test_pause_master_container(project, tmp_path):
    drill(project, tmp_path, "pause-master")


def test_kill_the_active_controller_keeps_the_master(project, tmp_path):
    before = ComposeCluster(project, str(tmp_path)).controller
    run = drill(project, tmp_path, "kill-controller")
    assert any("became the active controller" in note and before.name not in note
               for note in run.notes), run.notes
    # the master kept writing through the controllers' failover: no election, no outage
    assert run.result.recovery_s[0] is not None and run.result.recovery_s[0] < 2.0


def test_a_slow_slave_container_is_held_out_and_comes_back(project, tmp_path):
    """The container's quota is lifted after the fault (docker update --cpus <every CPU>: a
    quota of 0 leaves the old one in place) and the slave rejoins; the rate holds meanwhile."""
    run = drill(project, tmp_path, "slow-slave", GRAY)
    assert any("out of the sync state set" in n and "slow: acks take" in n for n in run.notes)


def test_kill_master_in_one_of_two_groups(project, tmp_path):
    """`--groups 2` against the containers: the load on both groups, broker-a's master
    killed; broker-b never fails a send, nothing is lost."""
    run = run_drill(DRILLS["kill-master"], DrillOptions(
        root=str(tmp_path / "groups"), base_port=0, timing=SHORT, workload=LIGHT,
        compose=project, groups=2))
    r = run.result
    assert r.passed, (r.failures, run.notes)
    assert not r.lost and not r.phantom and r.stored_duplicates == 0
    a, b = r.per_group["broker-a"], r.per_group["broker-b"]
    assert b.failed == b.unknown == b.moved_away == 0, b
    assert a.acked > 20 and b.acked > 20, r.per_group

"""One drill from start to verdict: start a fresh cluster (or attach to a running `cluster
local`, or to a running compose project), create the workload's topics (8 queues) and its FIFO group, run the load, play the
scenario, stop producing, drain (consumers go on until every acknowledged message arrived or
they stop making progress), check the History, stop everything it started by pid. The History
is saved as history.jsonl in the drill's folder.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Mapping

from cluster.drills.checker import DrillResult, Expectation, check
from cluster.drills.compose_cluster import ComposeCluster, ComposeProject
from cluster.drills.drill_cluster import DrillCluster
from cluster.drills.history import History, SendOutcome
from cluster.drills.gray_scenarios import DISK_DELAY_MS, slow_disk_trigger
from cluster.drills.scenarios import (METADATA_QUEUES, DrillContext, Drill, Timing,
                                      read_only_trigger)
from cluster.drills.target import DrillTarget
from cluster.drills.workload import Workload, WorkloadConfig
from common import failpoints

HISTORY_FILE = "history.jsonl"
# The gray-failure drills' load (issue 49's shape): four producers sending 1 KiB messages one
# at a time, each as soon as the previous one was answered (the rate bounds nothing), all to
# the first node (the master when the drill starts), as the official clients do.
GRAY_WORKLOAD = WorkloadConfig(producers=4, fifo_producers=0, rate=10_000.0, body_size=1024,
                               spread_producers=False)
NODES = ("master", "slave1", "slave2")


@dataclass(frozen=True)
class DrillOptions:
    root: str
    base_port: int
    timing: Timing = Timing()
    workload: WorkloadConfig = WorkloadConfig()
    controller_props: Mapping[str, str] = field(default_factory=dict)
    drain_idle_s: float = 30.0   # the drain ends when nothing new arrived for this long
    drain_max_s: float = 900.0   # or after this long in any case
    target_dir: str | None = None  # a running `cluster local` folder instead of a fresh cluster
    compose: ComposeProject | None = None  # a running compose project instead
    gray_workload: WorkloadConfig = GRAY_WORKLOAD  # the load of the gray-failure drills
    node_props: Mapping[str, str] = field(default_factory=dict)  # more keys for every node


@dataclass(frozen=True)
class DrillRun:
    drill: Drill
    result: DrillResult
    notes: tuple[str, ...]
    history_path: str
    seconds: float


def _all_consumed(history: History, groups: Mapping[str, str]) -> bool:
    acked: dict[str, set[str]] = {}
    for s in history.sends():
        if s.outcome is SendOutcome.OK:
            acked.setdefault(s.topic, set()).add(s.key)
    got: dict[str, set[str]] = {g: set() for g in groups}
    for r in history.receives():
        if r.group in got and r.key is not None:
            got[r.group].add(r.key)
    return all(acked.get(topic, set()) <= got[group] for group, topic in groups.items())


def _drain(history: History, groups: Mapping[str, str], options: DrillOptions) -> None:
    """Let the consumers read until every acknowledged message arrived in every group, or they
    stopped making progress (a long soak's late groups have a lot to read)."""
    start = last_progress = time.monotonic()
    seen = -1
    while not _all_consumed(history, groups):
        now = time.monotonic()
        count = history.receive_count()
        if count != seen:
            seen, last_progress = count, now
        if now - last_progress > options.drain_idle_s or now - start > options.drain_max_s:
            return
        time.sleep(0.5)


def _prepare(cluster: DrillTarget, workload: WorkloadConfig) -> None:
    master = cluster.current_master()
    assert master is not None
    with cluster.admin(master, timeout=10) as client:
        client.create_topic(workload.topic, queue_nums=METADATA_QUEUES)
        if workload.fifo_producers:
            client.create_topic(workload.fifo_topic, queue_nums=METADATA_QUEUES)
            client.upsert_group(workload.fifo_group, fifo=True)
        official = (workload.official_group,) if workload.official_consumers else ()
        for group in (workload.group, *workload.late_groups(), *official):
            client.upsert_group(group, fifo=False)


class NotTargetable(Exception):
    """A drill that needs a cluster it starts itself (cgroups, failpoints, another role), or
    that the chosen target cannot play."""


def _cluster_for(drill: Drill, options: DrillOptions) -> DrillTarget:
    root = os.path.abspath(options.root)
    if options.compose is not None:
        if not drill.compose:
            raise NotTargetable(f"drill {drill.name} runs against local processes only "
                                f"(--target local)")
        return ComposeCluster(options.compose, root)
    if not drill.local:
        raise NotTargetable(f"drill {drill.name} needs two controllers: --target compose")
    if options.target_dir:
        if not drill.targetable:
            raise NotTargetable(f"drill {drill.name} needs a cluster it starts itself "
                                f"(partitions, a failpoint or another master role)")
        return DrillCluster.attach(options.target_dir)
    node_env = None
    if drill.read_only or drill.slow_disk or drill.failpoints:
        node_env = {}
        for name in NODES:
            points = [drill.failpoints] if drill.failpoints else []
            if drill.read_only:
                points.append("fileio.write=fail_while:" + read_only_trigger(root, name))
            if drill.slow_disk:
                points.append(f"fileio.slow=delay_while:{DISK_DELAY_MS}:"
                              + slow_disk_trigger(root, name))
            node_env[name] = {failpoints.ENV: ",".join(points)}
    return DrillCluster.fresh(root, options.base_port, drill.role, options.controller_props,
                              node_env, partitions=drill.partitions,
                              node_props={**dict(drill.node_props), **options.node_props})


def run_drill(drill: Drill, options: DrillOptions) -> DrillRun:
    started = time.monotonic()
    os.makedirs(options.root, exist_ok=True)
    cluster = _cluster_for(drill, options)
    workload_config = options.gray_workload if drill.gray else options.workload
    if drill.official_producers > workload_config.official_producers:
        workload_config = dataclasses.replace(workload_config,
                                              official_producers=drill.official_producers)
    if cluster.attached:  # topics and groups of its own, apart from earlier runs'
        workload_config = workload_config.renamed(f"-{time.strftime('%Y%m%d%H%M%S')}")
    history = History()
    ctx = DrillContext(cluster, history, workload_config, options.timing)
    groups = workload_config.all_groups()
    workload = Workload([p.address for p in cluster.nodes], history, workload_config,
                        tls=cluster.tls, credentials=cluster.credentials)
    try:
        cluster.start_all()
        _prepare(cluster, workload_config)
        workload.start()
        time.sleep(options.timing.warmup_s)
        try:
            drill.run(ctx)
        except Exception as e:  # noqa: BLE001 - a step that did not happen is a finding
            ctx.problems.append(f"the drill could not complete: {e}")
        time.sleep(options.timing.after_s)
        workload.stop_producers()
        workload.start_late_readers()
        _drain(history, groups, options)
    finally:
        workload.stop()
        cluster.close()
        history_path = os.path.join(os.path.abspath(options.root), HISTORY_FILE)
        history.save(history_path)
    views = {"own consumers": workload_config.group}
    if workload_config.official_consumers:
        views["official consumers"] = workload_config.official_group
    result = check(history, Expectation(recovers=drill.recovers, groups=tuple(groups),
                                        topics_of_group=dict(groups), consumer_views=views,
                                        fifo_groups=frozenset(
                                            {workload_config.fifo_group}
                                            if workload_config.fifo_producers else ()),
                                        min_rate_ratio=drill.min_rate_ratio))
    if workload.consumer_errors:  # expected around a fault; the most common one says why
        total = sum(workload.consumer_errors.values())
        text, _ = max(workload.consumer_errors.items(), key=lambda kv: kv[1])
        ctx.notes.append(f"{total} consumer calls failed (most often: {text})")
    if ctx.problems:
        result = dataclasses.replace(result, failures=result.failures + tuple(ctx.problems))
    return DrillRun(drill, result, tuple(ctx.notes), history_path, time.monotonic() - started)

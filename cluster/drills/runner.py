"""One drill from start to verdict: start a fresh cluster (or attach to a running `cluster
local`, or to a running compose project), create the workload's topics (8 queues) and its FIFO group, run the load, play the
scenario, stop producing, drain (consumers go on until every acknowledged message arrived or
they stop making progress), check the History, stop everything it started by pid. The History
is saved as history.jsonl in the drill's folder.

With `groups` > 1 the cluster runs that many broker groups under its controller: the topics
are created in every group (cluster/assembly/group_topics.py, `topic create --groups all`'s
code) and the consumer groups on every group's master, the load spreads over every group's
queues through the route, and the scenario faults one group (`fault_group`, default the
first: broker-a) through its `target.group_target` view. The checker then also counts sends
per group and fails a drill in which another group saw a failed send.
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
from cluster.drills.scenarios import (DRILLS, METADATA_QUEUES, DrillContext, Drill, Timing,
                                      read_only_trigger)
from cluster.assembly.group_topics import cluster_route, create_in_groups
from cluster.client.client_errors import ClientError
from cluster.client.connection import ClientConfig, Connection
from cluster.client.routed_producer import writable_queues
from cluster.drills.target import DrillTarget, group_target
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
    groups: int = 1               # broker groups under the controller (--groups N)
    fault_group: str = ""         # the group the fault hits ("": the first, broker-a)

    def __post_init__(self) -> None:
        if isinstance(self.groups, bool) or not isinstance(self.groups, int) \
                or self.groups < 1:
            raise ValueError(f"groups must be a whole number >= 1, not {self.groups!r}")


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


def _prepare_groups(cluster: DrillTarget, names: list[str], workload: WorkloadConfig,
                    timeout: float = 30.0) -> None:
    """`_prepare` in every group of `names`: the topics through the CLI's create-in-groups
    path, the consumer groups on each group's master; then wait until the route a client gets
    from the first group's nodes lists every group's writable queues of each topic."""
    found: list = []

    def every_master() -> bool:
        route = cluster_route(cluster.controller.address, cluster.token, cluster.tls)
        found.append(route)
        return all(route.group(n) is not None and route.group(n).has_master for n in names)
    cluster.wait_for(every_master, timeout, f"a master in the route of each of "
                                            f"{', '.join(names)}")
    route = found[-1]
    topics = [workload.topic] + ([workload.fifo_topic] if workload.fifo_producers else [])
    for topic in topics:
        create_in_groups(route, names, cluster.token, topic, {"queue_nums": METADATA_QUEUES},
                         tls=cluster.tls)
    official = (workload.official_group,) if workload.official_consumers else ()
    for name in names:
        master = route.group(name)
        assert master is not None
        with cluster.admin(_Address(master.master_address), timeout=10) as client:
            if workload.fifo_producers:
                client.upsert_group(workload.fifo_group, fifo=True)
            for group in (workload.group, *workload.late_groups(), *official):
                client.upsert_group(group, fifo=False)
    entry = ";".join(p.address for p in cluster.groups[names[0]])
    access_key, secret_key = cluster.credentials
    with Connection(ClientConfig(entry, tls=cluster.tls, access_key=access_key,
                                 secret_key=secret_key)) as conn:
        def routed() -> bool:
            try:
                return all({q.broker_name for q in writable_queues(conn.route(t, refresh=True))}
                           >= set(names) for t in topics)
            except ClientError:
                return False
        cluster.wait_for(routed, timeout, f"the route of {', '.join(topics)} to list the "
                                          f"writable queues of {', '.join(names)}")


class _Address:
    """A node known only by its address (a group's master as the route names it)."""

    def __init__(self, address: str) -> None:
        self.address = address


class NotTargetable(Exception):
    """A drill that needs a cluster it starts itself (cgroups, failpoints, another role), or
    that the chosen target cannot play."""


def _cluster_for(drill: Drill, options: DrillOptions) -> DrillTarget:
    root = os.path.abspath(options.root)
    if options.compose is not None:
        if not drill.compose:
            raise NotTargetable(f"drill {drill.name} runs against local processes only "
                                f"(--target local)")
        if options.groups > 1 and not drill.groups:
            raise NotTargetable(f"drill {drill.name} does not run with several broker groups; "
                                f"with --groups N: {', '.join(GROUP_DRILLS)}")
        return ComposeCluster(options.compose, root, groups=options.groups)
    if not drill.local:
        raise NotTargetable(f"drill {drill.name} needs two controllers: --target compose")
    if options.groups > 1 and not drill.groups:
        raise NotTargetable(f"drill {drill.name} does not run with several broker groups "
                            f"(its fault is not inside one group, or it sets nodes up by "
                            f"name); with --groups N: {', '.join(GROUP_DRILLS)}")
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
                              node_props={**dict(drill.node_props), **options.node_props},
                              groups=options.groups)


GROUP_DRILLS = tuple(d.name for d in DRILLS.values() if d.groups)


def _group_names(cluster: DrillTarget, options: DrillOptions) -> tuple[list[str], str]:
    """The broker groups the drill loads (the cluster's first `options.groups`) and the one
    its fault hits; NotTargetable when the cluster has fewer groups or lacks the fault group."""
    have = list(cluster.groups)
    if options.groups > len(have):
        raise NotTargetable(f"--groups {options.groups}: the cluster has {len(have)} broker "
                         f"group(s) ({', '.join(have)})")
    names = have[:options.groups]
    fault = options.fault_group or names[0]
    if fault not in names:
        raise NotTargetable(f"fault group {fault!r} is not one of the drilled groups "
                         f"({', '.join(names)})")
    return names, fault


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
    try:
        names, fault_name = _group_names(cluster, options)
    except NotTargetable:
        cluster.close()
        raise
    fault = group_target(cluster, fault_name)
    ctx = DrillContext(fault, history, workload_config, options.timing)
    groups = workload_config.all_groups()
    several = len(names) > 1
    workload = Workload([p.address for n in names for p in cluster.groups[n]], history,
                        workload_config, tls=cluster.tls, credentials=cluster.credentials,
                        groups={n: [p.address for p in cluster.groups[n]] for n in names}
                        if several else None)
    try:
        cluster.start_all()
        if several:
            _prepare_groups(cluster, names, workload_config)
        else:
            _prepare(fault, workload_config)
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
                                        min_rate_ratio=drill.min_rate_ratio,
                                        broker_groups=tuple(names) if several else (),
                                        fault_group=fault_name if several else ""))
    if workload.consumer_errors:  # expected around a fault; the most common one says why
        total = sum(workload.consumer_errors.values())
        text, _ = max(workload.consumer_errors.items(), key=lambda kv: kv[1])
        ctx.notes.append(f"{total} consumer calls failed (most often: {text})")
    if ctx.problems:
        result = dataclasses.replace(result, failures=result.failures + tuple(ctx.problems))
    return DrillRun(drill, result, tuple(ctx.notes), history_path, time.monotonic() - started)

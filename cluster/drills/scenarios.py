"""The drills: each is a fault (and its repair) played against a running cluster (a DrillTarget:
local processes or a compose project's containers) while the workload runs. A scenario records when its fault started and was healed in the History, and
adds findings of its own (the metadata drill's routes) as `notes` / `problems`.

Timing comes from `DrillContext.timing`; the defaults fit the local cluster's controller
(failover after 3 s without a master heartbeat, 2 s lease).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

import grpc

from cluster.drills import gray_scenarios
from cluster.drills.history import History
from cluster.messaging.send import DROP_ANSWER
from cluster.drills.target import DrillTarget, TargetProcess
from cluster.drills.workload import WorkloadConfig


LOST_ANSWER_EVERY = 25  # the lost-answers drill: one stored send in this many


@dataclass(frozen=True)
class Timing:
    warmup_s: float = 4.0       # load before the fault
    fault_s: float = 8.0        # how long a pause/partition/read-only lasts (> failover timeout)
    after_s: float = 6.0        # load after the repair
    soak_s: float = 600.0       # the soak's length
    soak_every_s: float = 30.0  # one master kill per this many seconds
    gray_before_s: float = 10.0  # gray failures (gray_scenarios.py): the "before" window,
    gray_fault_s: float = 30.0   # how long the node is slow,
    gray_after_s: float = 15.0   # load once the group is whole again


@dataclass
class DrillContext:
    """What a scenario works with while it runs: the cluster under test, the History being
    recorded, the workload and timings, and the notes and problems (findings that fail the
    drill) it collects. Used from the scenario's thread."""

    cluster: DrillTarget
    history: History
    workload: WorkloadConfig
    timing: Timing
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # findings that fail the drill

    def master(self, timeout: float = 30.0) -> TargetProcess:
        found: list[TargetProcess] = []

        def has_master() -> bool:
            m = self.cluster.current_master()
            if m is not None:
                found.append(m)
            return m is not None
        self.cluster.wait_for(has_master, timeout, "a master")
        return found[-1]

    def wait_new_master(self, old: TargetProcess, timeout: float = 30.0) -> TargetProcess:
        self.cluster.wait_for(lambda: self.cluster.current_master() not in (None, old), timeout,
                              f"a master other than {old.name}")
        new = self.cluster.current_master()
        assert new is not None
        self.notes.append(f"{new.name} became master")
        return new

    def rejoin(self, proc: TargetProcess, timeout: float = 90.0) -> None:
        """Start `proc` again and wait until it follows the master in sync. A bound, not a
        figure: a container restarting while two groups, two controllers and Spark share two
        cores took more than 30 s to start, recover and catch up (the drill then failed
        without anything lost)."""
        self.cluster.start(proc)
        self.cluster.wait_for(lambda: self.cluster.in_sync_count() == 2, timeout,
                              f"{proc.name} back in sync")


Scenario = Callable[[DrillContext], None]


def note_master(ctx: DrillContext, when: str) -> None:
    m = ctx.cluster.current_master()
    ctx.notes.append(f"master {when}: {m.name if m else 'none'}")


def kill_master(ctx: DrillContext) -> None:
    master = ctx.master()
    name = f"kill -9 {master.name} (pid {master.pid})"
    master.kill()  # the fault starts once it is gone (a docker kill takes a moment)
    i = ctx.history.fault_started(name)
    ctx.wait_new_master(master)
    ctx.history.fault_healed(i)
    time.sleep(ctx.timing.after_s / 2)
    ctx.rejoin(master)


def pause_master(ctx: DrillContext) -> None:
    master = ctx.master()
    master.pause()
    i = ctx.history.fault_started(f"SIGSTOP {master.name} for {ctx.timing.fault_s:.0f} s")
    time.sleep(ctx.timing.fault_s)
    note_master(ctx, "at the end of the pause")
    master.resume()
    ctx.history.fault_healed(i)
    ctx.cluster.wait_for(lambda: ctx.cluster.in_sync_count() == 2, 30,
                         f"{master.name} following again")


def partition_master(ctx: DrillContext) -> None:
    master = ctx.master()
    others = [p for p in (ctx.cluster.controller, *ctx.cluster.nodes) if p is not master]
    ctx.cluster.partition([master], others)  # in force once the rules are in: the fault starts
    i = ctx.history.fault_started(f"partition {master.name} from the controller and the slaves "
                                  f"for {ctx.timing.fault_s:.0f} s")
    time.sleep(ctx.timing.fault_s)
    note_master(ctx, "at the end of the partition")
    ctx.cluster.heal_partitions()
    ctx.history.fault_healed(i)
    ctx.cluster.wait_for(lambda: ctx.cluster.in_sync_count() == 2, 30, "the group whole again")


def partition_slave(ctx: DrillContext) -> None:
    master = ctx.master()
    slave = ctx.cluster.slaves()[0]
    ctx.cluster.partition([slave], [master, ctx.cluster.controller])
    i = ctx.history.fault_started(f"partition {slave.name} from the master and the controller "
                                  f"for {ctx.timing.fault_s:.0f} s")
    time.sleep(ctx.timing.fault_s)
    ctx.cluster.heal_partitions()
    ctx.history.fault_healed(i)
    ctx.cluster.wait_for(lambda: ctx.cluster.in_sync_count() == 2, 30, f"{slave.name} in sync")


def kill_controller_and_master(ctx: DrillContext) -> None:
    master = ctx.master()
    ctrl = ctx.cluster.controller
    ctx.cluster.kill([ctrl, master])
    i = ctx.history.fault_started(f"kill -9 the controller {ctrl.name} and {master.name}")
    time.sleep(1.0)
    ctx.cluster.start(ctrl)  # its state file says who was in sync
    ctx.wait_new_master(master)
    ctx.history.fault_healed(i)
    ctx.rejoin(master)


def kill_controller(ctx: DrillContext) -> None:
    """Kill the active one of several controllers: a standby takes over (within the etcd
    lease) and the master stays master in its epoch, so writes go on (recovery ~0); any change
    of master or epoch is a problem. The killed controller comes back as a standby."""
    master = ctx.master()
    before = ctx.cluster.status(master)
    active = ctx.cluster.controller
    if len(ctx.cluster.controllers()) < 2:
        raise NeedsStandby("kill-controller needs a standby controller (--target compose)")
    active.kill()
    i = ctx.history.fault_started(f"kill -9 the active controller {active.name}")
    ctx.cluster.wait_for(lambda: ctx.cluster.controller is not active, 30,
                         f"a standby to take over from {active.name}")
    ctx.notes.append(f"{ctx.cluster.controller.name} became the active controller")
    ctx.history.fault_healed(i)
    time.sleep(ctx.timing.after_s / 2)
    after_master = ctx.cluster.current_master()
    after = ctx.cluster.status(after_master) if after_master else None
    if after_master is not master or after is None or before is None \
            or after.epoch != before.epoch:
        ctx.problems.append(
            f"the master changed with the controller: {master.name} epoch "
            f"{before.epoch if before else '?'} -> "
            f"{after_master.name if after_master else 'none'} epoch "
            f"{after.epoch if after else '?'}")
    ctx.cluster.start(active)  # back as a standby


class NeedsStandby(Exception):
    """The cluster has a single controller: killing it is kill-controller-and-master's job."""


def restart_all(ctx: DrillContext) -> None:
    procs = list(ctx.cluster.processes())  # in cold-start order (etcd, controllers, nodes)
    ctx.cluster.kill(procs)
    i = ctx.history.fault_started("kill -9 every process, then start them all")
    for p in procs:
        ctx.cluster.start(p)
    ctx.master(60)
    ctx.history.fault_healed(i)
    ctx.cluster.wait_for(lambda: ctx.cluster.in_sync_count() == 2, 60, "both slaves in sync")


def read_only_master(ctx: DrillContext) -> None:
    """The master's disk turns read-only (the `fileio.write` failpoint, armed in every node's
    environment at start, fires while its trigger file exists)."""
    master = ctx.master()
    trigger = read_only_trigger(ctx.cluster.root, master.name)
    i = ctx.history.fault_started(f"{master.name}'s store turns read-only")
    open(trigger, "w").close()
    ctx.wait_new_master(master)
    ctx.history.fault_healed(i)
    time.sleep(ctx.timing.after_s / 2)
    # the operator's repair: a writable disk and a restart; it rejoins as a slave
    os.unlink(trigger)
    master.stop()
    ctx.rejoin(master)


def read_only_trigger(root: str, name: str) -> str:
    """The file whose existence makes node `name`'s disk writes fail (EROFS)."""
    return os.path.join(root, f"{name}.readonly")


def lagging_slave_then_kill_master(ctx: DrillContext) -> None:
    """One slave is down, the other paused until it leaves the in-sync set; then the master dies.
    The group runs ASYNC_MASTER, so the master acknowledges alone once the controller shrank
    the sync state set to it (a SYNC_MASTER would stop acknowledging instead, and there would
    be nothing to lose). No in-sync slave is left, so the group must refuse writes
    (unavailable) rather than elect the lagging slave and lose what the master acknowledged
    alone; the master's restart heals it."""
    master = ctx.master()
    lagging, down = ctx.cluster.slaves()
    lagging_status = ctx.cluster.status(lagging)
    assert lagging_status is not None
    down.kill()
    lagging.pause()
    ctx.cluster.wait_for(lambda: ctx.cluster.in_sync_count() == 0, 30,
                         "both slaves out of the in-sync set")

    def stream_closed() -> bool:
        # Until the master closes the paused slave's stream, the kernel keeps buffering what it
        # sends, and the slave would resume with it: only then does the slave really lag.
        st = ctx.cluster.status(master)
        return st is not None and all(s.node_id != lagging_status.node_id for s in st.slaves)
    ctx.cluster.wait_for(stream_closed, 30, f"the master to close {lagging.name}'s stream")
    time.sleep(ctx.timing.warmup_s)  # writes the lagging slave does not have
    master.kill()
    i = ctx.history.fault_started(f"kill -9 {master.name} with {lagging.name} lagging and "
                                  f"{down.name} down")
    lagging.resume()
    time.sleep(ctx.timing.fault_s)
    note_master(ctx, f"{ctx.timing.fault_s:.0f} s after the kill")
    ctx.cluster.start(master)
    ctx.history.fault_healed(i)
    ctx.master(60)
    ctx.cluster.start(down)
    ctx.cluster.wait_for(lambda: ctx.cluster.in_sync_count() == 2, 60, "the group whole again")


def metadata(ctx: DrillContext) -> None:
    """Two failovers in a row; afterwards every node routes the topic with its 8 queues (the
    workload's topic is created with 8 queues before the load starts) and the checker finds
    every acknowledged message consumed, queues 4-7 included."""
    for _ in range(2):
        kill_master(ctx)
        time.sleep(ctx.timing.after_s / 2)
    for proc in ctx.cluster.nodes:
        queues = _queue_count(ctx.cluster, proc, ctx.workload.topic)
        ctx.notes.append(f"{proc.name}: {ctx.workload.topic} has {queues} queues")
        if queues != METADATA_QUEUES:
            ctx.problems.append(f"{proc.name} routes {ctx.workload.topic} with {queues} queues, "
                                f"not {METADATA_QUEUES}")


METADATA_QUEUES = 8


def _queue_count(cluster: DrillTarget, proc: TargetProcess, topic: str) -> int:
    """The write queue count of `topic` in the node's topic table (0: not there). Retried for a
    while: a node restarted a moment ago may still be behind gRPC's reconnect backoff."""
    found: list[int] = []

    def listed() -> bool:
        try:
            with cluster.admin(proc, timeout=5) as client:
                topics = {t.name: t for t in client.list_topics().topics}
        except grpc.RpcError:
            return False
        found.append(topics[topic].write_queue_nums if topic in topics else 0)
        return True
    cluster.wait_for(listed, 30, f"the topic table of {proc.name}")
    return found[-1]


def lost_answers(ctx: DrillContext) -> None:
    """Every node answers one stored send in LOST_ANSWER_EVERY as if its answer was lost
    (failpoint DROP_ANSWER, armed from the start): the official producers retry those with the
    same message id, and the duplicate window must answer the retry with the first receipt
    instead of storing the message again. Halfway, the master is killed, so retries also
    reach a new master, which rebuilt its window from its own log."""
    time.sleep(ctx.timing.fault_s)
    kill_master(ctx)


def soak(ctx: DrillContext) -> None:
    """Kill the master every `soak_every_s` for `soak_s`; each killed master restarts after
    a third of the interval and rejoins as a slave."""
    end = time.monotonic() + ctx.timing.soak_s
    while time.monotonic() + ctx.timing.soak_every_s <= end + 1:
        round_start = time.monotonic()
        kill_master(ctx)
        rest = ctx.timing.soak_every_s - (time.monotonic() - round_start)
        if rest > 0:
            time.sleep(rest)


@dataclass(frozen=True)
class Drill:
    """One drill of the catalogue: its name, the scenario that injects the fault, what it
    is about, whether the group must recover, what it needs (partitions, the read-only
    failpoint, a master role) and which targets it runs against."""

    name: str
    run: Scenario
    about: str
    recovers: bool = True       # False: the group must stay unavailable until healed
    partitions: bool = False    # needs root, iptables and cgroup v2
    read_only: bool = False     # nodes start with the read-only failpoint armed
    failpoints: str = ""        # RMQSTORE_FAILPOINTS of every node it starts
    official_producers: int = 0  # at least this many producers of the official client
    role: str = "SYNC_MASTER"   # the master role the group starts with
    compose: bool = False       # runs against a compose project (--target compose)
    local: bool = True          # runs against local processes (--target local)
    gray: bool = False          # a gray failure: closed-loop load, rate and p99 per window
    slow_disk: bool = False     # nodes start with the slow-disk failpoint armed
    node_props: tuple[tuple[str, str], ...] = ()  # more keys in every node's config
    # the write rate during the fault (after the grace) must be this share of before's
    min_rate_ratio: float | None = None
    # runs with several broker groups (--groups N): its fault stays inside one group (not the
    # shared controller, not every process) and needs nothing set up per node name
    groups: bool = False

    @property
    def targetable(self) -> bool:
        """Runs against a running `cluster local` too (it needs nothing set up at start)."""
        return self.local and not (self.partitions or self.read_only or self.slow_disk
                                   or self.failpoints or self.node_props
                                   or self.role != "SYNC_MASTER")


DRILLS = {d.name: d for d in (
    Drill("kill-master", kill_master, "kill -9 the master; it restarts and rejoins",
          compose=True, groups=True),
    Drill("pause-master", pause_master, "SIGSTOP the master past the failover timeout, resume it",
          compose=True, groups=True),
    Drill("partition-master", partition_master,
          "cut the master from the controller and the slaves", partitions=True, compose=True,
          groups=True),
    Drill("partition-slave", partition_slave, "cut one slave from the master and controller",
          partitions=True, compose=True, groups=True),
    Drill("kill-controller", kill_controller,
          "kill -9 the active controller: a standby takes over, the master stays",
          compose=True, local=False),
    Drill("kill-controller-and-master", kill_controller_and_master,
          "kill -9 the (active) controller and the master together", compose=True),
    Drill("restart-all", restart_all, "kill -9 everything and start it all again",
          compose=True),
    Drill("read-only-master", read_only_master, "the master's store turns read-only",
          read_only=True),
    Drill("lagging-slave", lagging_slave_then_kill_master,
          "one slave down, one lagging, then kill the master: unavailable, not lossy",
          recovers=False, role="ASYNC_MASTER"),
    Drill("metadata", metadata, "an 8-queue topic through two failovers", groups=True),
    Drill("lost-answers", lost_answers,
          f"one stored send in {LOST_ANSWER_EVERY} answered as lost, and a master kill: "
          f"the official client's retries must not be stored twice",
          failpoints=f"{DROP_ANSWER}=every:{LOST_ANSWER_EVERY}", official_producers=2),
    Drill("soak", soak, "kill the master every 30 s for 10 minutes", groups=True),
    Drill("slow-slave", gray_scenarios.slow_slave,
          "one slave at 5% of a CPU for 30 s: out of the sync state set, the rate back",
          gray=True, min_rate_ratio=0.8, compose=True, groups=True),
    Drill("slow-disk-slave", gray_scenarios.slow_disk_slave,
          "one slave's disk writes 200 ms slower for 30 s: out, the rate back",
          gray=True, slow_disk=True, min_rate_ratio=0.8),
    Drill("slow-link-slave", gray_scenarios.slow_link_slave,
          "100 ms each way on one slave's link to the master for 30 s: out, the rate back",
          gray=True, partitions=True, min_rate_ratio=0.8, groups=True),
    Drill("slow-slave-strict", gray_scenarios.slow_slave_strict,
          "slow-slave with minInSyncReplicas=3: writes refused naming it, the set kept",
          gray=True, node_props=(("minInSyncReplicas", "3"),), groups=True),
    Drill("slow-master", gray_scenarios.slow_master,
          "the master at 5% of a CPU for 30 s: measured and reported", gray=True, compose=True,
          groups=True),
    Drill("slow-controller", gray_scenarios.slow_controller,
          "the controller at 5% of a CPU for 30 s: measured and reported", gray=True),
)}

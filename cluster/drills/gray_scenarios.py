"""Gray failures (issue 49): a node that is alive but slow, under a closed-loop load (each
producer sends its next message once the previous one is answered, as an application does).

Each scenario lets the group run whole for `gray_before_s` (the "before" window), makes one
node slow for `gray_fault_s` and then fast again, waits for the group to be whole, and lets it
run for `gray_after_s`. Meanwhile it watches the controller's sync state set and notes when the
slow node left it and came back, with the reasons the controller recorded, and how many times
the set changed from the fault's start on (more than two for one fault is flapping: a
problem). The write rate and p99 before, during and after come from the History (phases.py).

    slow-slave        one slave's processes get 5% of a CPU (a cgroup quota, cpu_quota.py)
    slow-disk-slave   every write of one slave's disk takes 200 ms more (the `fileio.slow`
                      failpoint, armed in every node at start, fires while its trigger exists)
    slow-link-slave   100 ms each way on one slave's connections to the master (a delaying
                      proxy the firewall sends them through: delay_proxy.py, partition.Redirect)
    slow-master       the master's processes get 5% of a CPU: measured and reported
    slow-controller   the controller's process gets 5% of a CPU: measured and reported
    slow-slave-strict slow-slave with minInSyncReplicas = the group's size: writes must be
                      refused naming the slow slave, and the set must not shrink
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import grpc

from cluster.client.controller_client import ControllerClient

if TYPE_CHECKING:
    from cluster.drills.scenarios import DrillContext
    from cluster.drills.target import TargetProcess
    from proto import controller_pb2

CPU_PERCENT = 5.0
DISK_DELAY_MS = 200
LINK_DELAY_S = 0.1
POLL_S = 0.5


def slow_disk_trigger(root: str, name: str) -> str:
    """The file whose existence slows node `name`'s disk writes (the `fileio.slow` failpoint)."""
    return os.path.join(root, f"{name}.slowdisk")


@dataclass
class _Watch:
    """What the scenario saw of the slow node in the controller's sync state set."""
    node_id: str
    fault_wall_ms: int
    removed_after_s: float | None = None
    removed_reason: str = ""
    back_after_release_s: float | None = None


def slow_slave(ctx: "DrillContext") -> None:
    slave = _replica(ctx)
    _gray(ctx, slave, f"{slave.name} limited to {CPU_PERCENT:.0f}% of a CPU",
          lambda: ctx.cluster.throttle(slave, CPU_PERCENT),
          lambda: ctx.cluster.unthrottle(slave))


def slow_slave_strict(ctx: "DrillContext") -> None:
    """minInSyncReplicas = 3 (the drill's node_props): the set must keep the slow slave and the
    master refuse writes naming it."""
    slave = _replica(ctx)
    _gray(ctx, slave, f"{slave.name} limited to {CPU_PERCENT:.0f}% of a CPU "
                      f"(minInSyncReplicas=3)",
          lambda: ctx.cluster.throttle(slave, CPU_PERCENT),
          lambda: ctx.cluster.unthrottle(slave), strict=True)


def slow_disk_slave(ctx: "DrillContext") -> None:
    slave = _replica(ctx)
    trigger = slow_disk_trigger(ctx.cluster.root, slave.name)
    _gray(ctx, slave, f"{slave.name}'s disk writes take {DISK_DELAY_MS} ms more",
          lambda: open(trigger, "w").close(), lambda: os.unlink(trigger))


def slow_link_slave(ctx: "DrillContext") -> None:
    master = ctx.master()
    slave = _replica(ctx)
    proxy = ctx.cluster.delay_link(slave, master)  # at once, before the "before" window
    ctx.cluster.wait_for(lambda: _whole(ctx), 60, f"{slave.name} following through the proxy")

    def start() -> None:
        proxy.delay_s = LINK_DELAY_S

    def stop() -> None:
        proxy.delay_s = 0.0
    _gray(ctx, slave, f"{slave.name}'s connections to the master delayed "
                      f"{LINK_DELAY_S * 1000:.0f} ms each way", start, stop)


def slow_master(ctx: "DrillContext") -> None:
    """Measured and reported: the slaves ack what the slow master sends as fast as it sends it,
    so no member is slower than another and none is removed (nothing to gain); a master too
    slow to heartbeat in time is replaced by the controller like a dead one."""
    master = ctx.master()
    _gray(ctx, master, f"the master {master.name} limited to {CPU_PERCENT:.0f}% of a CPU",
          lambda: ctx.cluster.throttle(master, CPU_PERCENT),
          lambda: ctx.cluster.unthrottle(master), expect_removal=False)


def slow_controller(ctx: "DrillContext") -> None:
    """Measured and reported: every heartbeat waits for the controller (one second at most);
    without an answer a master's lease ends after two seconds and it stops acknowledging."""
    ctrl = ctx.cluster.controller
    _gray(ctx, ctrl, f"the controller {ctrl.name} limited to {CPU_PERCENT:.0f}% of a CPU",
          lambda: ctx.cluster.throttle(ctrl, CPU_PERCENT),
          lambda: ctx.cluster.unthrottle(ctrl), expect_removal=False, node_id="")


def _replica(ctx: "DrillContext") -> "TargetProcess":
    """The slave to slow down: one that is not the workload's entry node (the first node, to
    which the gray drills' producers all send, as a pick_first channel does). Slowing the
    entry node slows every send by its forwarding, whatever replication does: in the compose
    cluster the container named master is often a slave after the first election."""
    entry = ctx.cluster.nodes[0]
    slaves = ctx.cluster.slaves()
    return next((p for p in slaves if p is not entry), slaves[0])


def _gray(ctx: "DrillContext", slow: "TargetProcess", what: str, start: Callable[[], None],
          stop: Callable[[], None], *, expect_removal: bool = True, strict: bool = False,
          node_id: str | None = None) -> None:
    """`node_id`: the slow process's node id ("": not a node, e.g. the controller; None: ask
    its status)."""
    t = ctx.timing
    ctx.cluster.wait_for(lambda: _whole(ctx), 60, "the group whole before the fault")
    if node_id is None:
        status = ctx.cluster.status(slow)
        if status is None:
            raise RuntimeError(f"{slow.name} does not answer")
        node_id = status.node_id
    time.sleep(t.gray_before_s)
    watch = _Watch(node_id, int(time.time() * 1000))
    master_before = ctx.cluster.current_master()
    start()
    started = time.monotonic()
    i = ctx.history.fault_started(f"{what} for {t.gray_fault_s:.0f} s")
    try:
        _watch_until(ctx, watch, started, started + t.gray_fault_s)
    finally:
        stop()
    ctx.history.fault_healed(i)
    released = time.monotonic()
    master_after = ctx.cluster.current_master()
    if master_after is not master_before:
        ctx.notes.append(f"the master changed during the fault: "
                         f"{master_before.name if master_before else 'none'} -> "
                         f"{master_after.name if master_after else 'none'}")
    ctx.cluster.wait_for(lambda: _whole(ctx), 120, f"{slow.name} back in the sync state set")
    watch.back_after_release_s = time.monotonic() - released
    time.sleep(t.gray_after_s)
    _conclude(ctx, watch, expect_removal, strict)


def _watch_until(ctx: "DrillContext", watch: _Watch, started: float, until: float) -> None:
    """Poll the controller while the fault lasts: when the slow node left the set, and why."""
    while time.monotonic() < until:
        group = _group(ctx)
        if group is not None and watch.removed_after_s is None and watch.node_id \
                and watch.node_id not in group.sync_state_set:
            watch.removed_after_s = time.monotonic() - started
            removed = [c for c in group.sync_state_changes
                       if c.node_id == watch.node_id and not c.added]
            watch.removed_reason = removed[0].reason if removed else ""
        time.sleep(POLL_S)


def _conclude(ctx: "DrillContext", watch: _Watch, expect_removal: bool, strict: bool) -> None:
    group = _group(ctx)
    changes = [c for c in (group.sync_state_changes if group is not None else ())
               if c.at_ms >= watch.fault_wall_ms]
    ctx.notes.append(f"sync state set changes from the fault on: {len(changes)}" + "".join(
        f"; {'+' if c.added else '-'}{c.node_id} ({c.reason[:120]})" for c in reversed(changes)))
    if watch.removed_after_s is not None:
        ctx.notes.append(f"{watch.node_id} out of the sync state set {watch.removed_after_s:.1f} s "
                         f"after the fault started: {watch.removed_reason[:200]}")
    elif watch.node_id:
        ctx.notes.append(f"{watch.node_id} stayed in the sync state set")
    if watch.back_after_release_s is not None:
        ctx.notes.append(f"the group was whole again {watch.back_after_release_s:.1f} s after "
                         f"the release")
    if len(changes) > 2:
        ctx.problems.append(f"the sync state set changed {len(changes)} times for one fault "
                            f"(flapping; at most 2)")
    if strict:
        _strict_findings(ctx, watch, changes)
    elif expect_removal and watch.removed_after_s is None:
        ctx.problems.append(f"the slow {watch.node_id} was never removed from the sync state "
                            f"set")


def _strict_findings(ctx: "DrillContext", watch: _Watch, changes: list) -> None:
    """minInSyncReplicas = the group: no change of the set, writes refused naming the slave."""
    if changes:
        ctx.problems.append("the sync state set shrank below minInSyncReplicas")
    fault = ctx.history.faults()[-1]
    healed = fault.healed if fault.healed is not None else float("inf")
    refused = [s for s in ctx.history.sends() if fault.started <= s.started < healed
               and "IN_SYNC_REPLICAS_NOT_ENOUGH" in s.detail]
    naming = [s for s in refused if watch.node_id in s.detail]
    ctx.notes.append(f"{len(refused)} sends refused IN_SYNC_REPLICAS_NOT_ENOUGH during the "
                     f"fault, {len(naming)} naming {watch.node_id}" +
                     (f", e.g. {naming[0].detail[:200]!r}" if naming else ""))
    if not naming:
        ctx.problems.append(f"no refusal named the slow {watch.node_id}")


def _group(ctx: "DrillContext") -> "controller_pb2.GroupView | None":
    try:
        with ControllerClient(ctx.cluster.controller.address, ctx.cluster.token, timeout=5,
                              tls=ctx.cluster.tls) as client:
            groups = client.groups().groups
    except grpc.RpcError:
        return None
    return groups[0] if groups else None


def _whole(ctx: "DrillContext") -> bool:
    """A master with both slaves in its in-sync set and the controller's set."""
    group = _group(ctx)
    return ctx.cluster.in_sync_count() == 2 and group is not None \
        and len(group.sync_state_set) == 3

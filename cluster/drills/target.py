"""What a drill's scenarios need from the cluster they fault, whatever runs it: local processes
(drill_cluster.DrillCluster) or containers of a compose project (compose_cluster.ComposeCluster).

`TargetProcess` is one controller, node (or etcd) that can be killed, paused, stopped and
started again; `DrillTarget` is the cluster. `GroupViews` holds what both clusters ask the
nodes the same way (status over the Admin API, the current master, the sync state set), so
the two only differ in how they start, stop and cut off processes.

Several broker groups under one controller: a target lists its nodes per group in `groups`
(broker name -> that group's nodes, in layout order; one entry for a cluster of one group)
and `group_target(target, name)` is the DrillTarget a scenario faults: the target itself when
it has one group, else a `GroupTarget`, whose master, slaves and sync state set are that
group's, and which leaves the processes to the whole target. Any target that fills `groups`
(local processes; compose once its services say their group) gets group drills this way.
"""
from __future__ import annotations

import time
from typing import Callable, Protocol, Sequence

import grpc

from cluster.client.admin_client import AdminClient
from cluster.security.tls import ClientTls
from proto import admin_pb2 as pb

MASTER_ROLES = ("SYNC_MASTER", "ASYNC_MASTER")


class TargetProcess(Protocol):
    """A process (or a container) a drill faults. `address` is where this host reaches it
    ("" for etcd, which the drill never calls)."""
    name: str
    address: str
    paused: bool

    @property
    def pid(self) -> int: ...
    def kill(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def stop(self, timeout: float = 30.0) -> None: ...
    def alive(self) -> bool: ...


class DrillTarget(Protocol):
    """The cluster a drill runs against. `controller` is the controller that answers now (the
    only one of a local cluster, the active one of several); `processes()` lists every process
    in the order a cold start brings them up."""
    root: str
    token: str
    tls: ClientTls | None  # how clients reach the nodes (None: plaintext)
    credentials: tuple[str, str]  # the ACL user clients sign with (("", ""): unsigned)
    nodes: list  # every node of every group
    groups: dict  # broker name -> its nodes (every node in exactly one group)
    by_name: dict
    attached: bool  # someone else's cluster: the drill names its topics per run, leaves it up

    @property
    def controller(self) -> TargetProcess: ...
    def controllers(self) -> Sequence[TargetProcess]: ...
    def processes(self) -> Sequence[TargetProcess]: ...
    def kill(self, procs: list) -> None:
        """Kill all of `procs` together (one signal round, not one after the other: a master
        still acknowledging while the controller dies would hide the outage)."""
    def start(self, proc) -> None: ...
    def start_all(self, timeout: float = 30.0) -> None: ...
    def close(self) -> None: ...
    def admin(self, proc, timeout: float = 2.0) -> AdminClient: ...
    def status(self, proc) -> pb.NodeStatus | None: ...
    def current_master(self): ...
    def in_sync_count(self) -> int: ...
    def slaves(self) -> list: ...
    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None: ...
    def partition(self, a: list, b: list) -> object: ...
    def heal_partitions(self) -> None: ...
    def throttle(self, proc, percent: float) -> None:
        """Limit `proc` to `percent` of one CPU (a cgroup quota) until unthrottle()."""
    def unthrottle(self, proc) -> None: ...


class GroupViews:
    """The replica group as its nodes report it over the Admin API. Needs `self.nodes` (with
    `address`, `alive()`, `paused`), `self.token` and `self.tls`."""
    nodes: list
    token: str
    tls: ClientTls | None = None
    credentials: tuple[str, str] = ("", "")

    def admin(self, proc, timeout: float = 2.0) -> AdminClient:
        return AdminClient(proc.address, self.token, timeout=timeout, tls=self.tls)

    def status(self, proc) -> pb.NodeStatus | None:
        if not proc.alive() or proc.paused:
            return None
        try:
            with self.admin(proc) as client:
                return client.status()
        except grpc.RpcError:
            return None

    def current_master(self):
        """The live node that says it is master with the highest epoch."""
        best = None
        for proc in self.nodes:
            st = self.status(proc)
            if st is not None and st.role in MASTER_ROLES and (best is None or st.epoch > best[0]):
                best = (st.epoch, proc)
        return best[1] if best else None

    def in_sync_count(self) -> int:
        master = self.current_master()
        st = self.status(master) if master else None
        return len(st.in_sync_set) if st else 0

    def slaves(self) -> list:
        """The nodes that are not the master, once a master answers (a status call that failed
        under load must not make the master one of "the slaves": a slow-slave drill then
        throttled the master)."""
        master = None
        for _ in range(50):
            master = self.current_master()
            if master is not None:
                break
            time.sleep(0.2)
        if master is None:
            raise RuntimeError("no node answers as master: cannot tell which nodes are slaves")
        return [p for p in self.nodes if p is not master]

    @staticmethod
    def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.2)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def group_target(target: DrillTarget, name: str) -> DrillTarget:
    """The DrillTarget of broker group `name` of `target` (see the module docstring);
    KeyError naming the groups for an unknown name."""
    if name not in target.groups:
        raise KeyError(f"no broker group {name!r} in this cluster "
                       f"(it has {', '.join(target.groups)})")
    if len(target.groups) == 1:
        return target
    return GroupTarget(target, name)


class GroupTarget(GroupViews):
    """One broker group of a target of several, as the DrillTarget its scenarios fault: the
    master, slaves, sync state set and `processes()` are the group's nodes; the controller,
    starting, killing, partitions and CPU quotas are the whole target's (which owns and closes
    every process: `close()` here does nothing). No state of its own besides the two
    references, so no lock."""

    def __init__(self, whole: DrillTarget, name: str) -> None:
        self.whole, self.name = whole, name
        self.nodes = list(whole.groups[name])
        self.groups = {name: self.nodes}
        self.root, self.token, self.tls = whole.root, whole.token, whole.tls
        self.credentials, self.attached = whole.credentials, whole.attached
        self.by_name = whole.by_name

    @property
    def controller(self) -> TargetProcess:
        return self.whole.controller

    def controllers(self) -> Sequence[TargetProcess]:
        return self.whole.controllers()

    def processes(self) -> Sequence[TargetProcess]:
        """The group's nodes (the controller serves every group: not this group's to fault)."""
        return list(self.nodes)

    def kill(self, procs: list) -> None:
        self.whole.kill(procs)

    def start(self, proc) -> None:
        self.whole.start(proc)

    def start_all(self, timeout: float = 30.0) -> None:
        self.whole.start_all(timeout)

    def close(self) -> None:
        """Nothing: the whole target closes what it started."""

    def partition(self, a: list, b: list) -> object:
        return self.whole.partition(a, b)

    def heal_partitions(self) -> None:
        self.whole.heal_partitions()

    def throttle(self, proc, percent: float) -> None:
        self.whole.throttle(proc, percent)

    def unthrottle(self, proc) -> None:
        self.whole.unthrottle(proc)

    def delay_link(self, proc, to):
        """The whole target's delaying proxy (local processes only: AttributeError elsewhere,
        as for a target of one group)."""
        return self.whole.delay_link(proc, to)  # type: ignore[attr-defined]


def wait_groups_whole(target: DrillTarget, timeout: float) -> None:
    """Wait until every group of `target` has a master with both slaves in sync."""
    for name in target.groups:
        view = group_target(target, name)
        where = f" in {name}" if len(target.groups) > 1 else ""
        target.wait_for(lambda v=view: v.current_master() is not None
                        and v.in_sync_count() == 2, timeout,
                        f"a master with both slaves in sync{where}")

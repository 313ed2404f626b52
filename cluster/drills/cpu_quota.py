"""A CPU quota on a running process tree, as a noisy neighbour or a container limit would impose
it: the gray-failure drills' "slow" node (issue 49). A cgroup of its own with a CFS bandwidth
limit of `percent` of one CPU: cgroup v2's `cpu.max` ("5000 100000" for 5%) where the cpu
controller is in the unified hierarchy, else cgroup v1's `cpu.cfs_quota_us` /
`cpu.cfs_period_us` in the cpu hierarchy (a hybrid host such as this one mounts cpu as v1).

The process and its children (a node's index and conversion processes) move into the group
when the quota is applied and back into the cgroups they came from when it is released, so
the partition drills' v2 groups (cgroup v2 is separate from v1's cpu hierarchy) are left as
they were. Needs root; `CpuQuotaUnavailable` says what is missing.
"""
from __future__ import annotations

import os

import psutil

from cluster.drills.partition import cgroup2_root, PartitionUnavailable

PERIOD_US = 100_000
GROUP_PREFIX = "rmq-drill-cpu-"


class CpuQuotaUnavailable(Exception):
    """This machine cannot limit a process's CPU (not root, no cpu controller)."""


def _v1_cpu_root() -> str | None:
    with open("/proc/self/mounts", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 4 and fields[2] == "cgroup" and "cpu" in fields[3].split(","):
                return fields[1]
    return None


def _v2_cpu_root() -> str | None:
    try:
        root = cgroup2_root()
    except PartitionUnavailable:
        return None
    try:
        with open(os.path.join(root, "cgroup.controllers"), encoding="ascii") as f:
            return root if "cpu" in f.read().split() else None
    except OSError:
        return None


class CpuQuota:
    """A cgroup limiting a process tree to `percent` of one CPU. Owns its group directory
    (`<cpu root>/rmq-drill-cpu-<owner pid>-<tag>`: the pid of the process that made it, so
    `remove_leftovers()` can tell a killed drill's group from a running one's) and remembers
    where each moved process came from; used from the drill's thread only (no lock)."""

    def __init__(self, tag: str, percent: float) -> None:
        if os.geteuid() != 0:
            raise CpuQuotaUnavailable("a CPU quota needs root (cgroups)")
        if not 0 < percent <= 100:
            raise ValueError(f"percent must be in (0, 100], got {percent}")
        v2 = _v2_cpu_root()
        self.root = v2 or _v1_cpu_root() or ""
        if not self.root:
            raise CpuQuotaUnavailable("no cgroup cpu controller is mounted (v1 or v2)")
        self.v2 = v2 is not None
        self.percent = percent
        self.group = os.path.join(self.root, f"{GROUP_PREFIX}{os.getpid()}-{tag}")
        self._came_from: dict[int, str] = {}  # pid -> its cgroup directory before

    def apply(self, pid: int) -> list[int]:
        """Limit `pid` and its children; returns the pids moved."""
        os.makedirs(self.group, exist_ok=True)
        quota = int(PERIOD_US * self.percent / 100)
        if self.v2:
            self._enable_cpu_controller()
            _write(os.path.join(self.group, "cpu.max"), f"{quota} {PERIOD_US}")
        else:
            _write(os.path.join(self.group, "cpu.cfs_period_us"), str(PERIOD_US))
            _write(os.path.join(self.group, "cpu.cfs_quota_us"), str(quota))
        try:
            proc = psutil.Process(pid)
            tree = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        moved = []
        for p in tree:
            self._came_from.setdefault(p.pid, self._cgroup_of(p.pid))
            try:
                _write(os.path.join(self.group, "cgroup.procs"), str(p.pid))
                moved.append(p.pid)
            except ProcessLookupError:
                pass  # exited meanwhile
        return moved

    def release(self) -> None:
        """Move every process back where it came from and remove the group."""
        _empty_and_remove(self.root, self.group, self._came_from)
        self._came_from.clear()

    def _cgroup_of(self, pid: int) -> str:
        """The directory of `pid`'s cgroup in this hierarchy (v2: "0::", v1: the cpu line)."""
        try:
            with open(f"/proc/{pid}/cgroup", encoding="ascii") as f:
                for line in f:
                    _, controllers, path = line.rstrip("\n").split(":", 2)
                    if (self.v2 and controllers == "") or \
                            (not self.v2 and "cpu" in controllers.split(",")):
                        return os.path.join(self.root, path.lstrip("/"))
        except OSError:
            pass
        return self.root

    def _enable_cpu_controller(self) -> None:
        """v2: the group's parent must hand the cpu controller down."""
        control = os.path.join(os.path.dirname(self.group), "cgroup.subtree_control")
        try:
            with open(control, encoding="ascii") as f:
                if "cpu" in f.read().split():
                    return
            _write(control, "+cpu")
        except OSError as e:
            raise CpuQuotaUnavailable(f"cannot enable the cpu controller in {control}: {e}") \
                from e


def remove_leftovers() -> list[str]:
    """Remove the quota groups a killed drill left behind (their processes go to the root).
    A group whose owner still runs is a drill in progress, perhaps in another test worker or
    terminal, and is left alone: removing it would silently lift that drill's fault."""
    removed = []
    for root in filter(None, (_v2_cpu_root(), _v1_cpu_root())):
        for name in os.listdir(root):
            if name.startswith(GROUP_PREFIX) and not _owner_alive(name):
                _empty_and_remove(root, os.path.join(root, name), {})
                removed.append(os.path.join(root, name))
    return removed


def _owner_alive(name: str) -> bool:
    owner = name[len(GROUP_PREFIX):].split("-", 1)[0]
    return owner.isdigit() and int(owner) != 0 and psutil.pid_exists(int(owner))


def _empty_and_remove(root: str, group: str, came_from: dict[int, str]) -> None:
    """Move the processes of `group` back to their old cgroups (`came_from`, else the root)
    and remove it."""
    try:
        with open(os.path.join(group, "cgroup.procs"), encoding="ascii") as f:
            pids = [int(p) for p in f.read().split()]
    except OSError:
        pids = []
    for pid in pids:
        for target in dict.fromkeys((came_from.get(pid, root), root)):
            try:
                _write(os.path.join(target, "cgroup.procs"), str(pid))
                break
            except OSError:  # its old group is gone, or it exited
                continue
    try:
        os.rmdir(group)
    except OSError:
        pass


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(text)

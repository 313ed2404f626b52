"""What else the machine did during a measured window: CPU taken by the hypervisor (steal) and
the CPU seconds of chosen processes, per message.

Why: these benchmarks run on shared virtual machines where the host takes a varying share of
the cores (steal). Between two runs minutes apart it moved from about 2% to 22% here, and with
it every rate and latency by up to 4x, so a figure is only readable next to the steal of its
window. CPU seconds per message of a process move far less with steal than rates do.

Steal comes from the aggregate `cpu` line of /proc/stat (Linux; fields in USER_HZ ticks):

    cpu  user nice system idle iowait irq softirq steal guest guest_nice

steal share = delta(steal) / delta(user + nice + system + idle + iowait + irq + softirq +
steal); guest time is already counted in user. None where /proc/stat or the column is missing.
"""
from __future__ import annotations

import time

import psutil

PROC_STAT = "/proc/stat"


def _cpu_ticks() -> tuple[int, int] | None:
    """(steal ticks, total ticks) of all CPUs since boot, or None without a steal column."""
    try:
        with open(PROC_STAT, encoding="ascii") as f:
            first = f.readline().split()
    except OSError:
        return None
    if len(first) < 9 or first[0] != "cpu":
        return None
    ticks = [int(x) for x in first[1:9]]
    return ticks[7], sum(ticks)


class StealWindow:
    """Context manager: the share of CPU time stolen by the host while it was entered
    (`share`, 0..1, None when unknown). Reusable: each `with` measures a new window and
    `shares` keeps every window's share."""

    def __init__(self) -> None:
        self._start: tuple[int, int] | None = None
        self.share: float | None = None
        self.shares: list[float] = []

    def __enter__(self) -> "StealWindow":
        self._start = _cpu_ticks()
        return self

    def __exit__(self, *exc) -> None:
        end = _cpu_ticks()
        self.share = None
        if self._start is not None and end is not None and end[1] > self._start[1]:
            self.share = (end[0] - self._start[0]) / (end[1] - self._start[1])
            self.shares.append(self.share)


class CpuWindow:
    """Context manager: CPU seconds (user + system) each of `pids` used while it was entered,
    and the wall time. `per_message(n)` gives microseconds per message per process."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.used: dict[str, float] = {}
        self.wall = 0.0
        self._start: dict[str, float] = {}

    @staticmethod
    def _cpu(proc: psutil.Process) -> float:
        t = proc.cpu_times()
        return t.user + t.system

    def __enter__(self) -> "CpuWindow":
        self._start = {name: self._cpu(p) for name, p in self.procs.items()}
        self.wall = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.wall
        self.used = {name: self._cpu(p) - self._start[name] for name, p in self.procs.items()}

    def per_message(self, messages: int) -> dict[str, float]:
        n = max(messages, 1)
        return {name: used / n * 1e6 for name, used in self.used.items()}

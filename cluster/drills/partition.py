"""Network partitions between local processes: cgroups plus firewall rules on loopback.

On loopback every connection's source address is 127.0.0.1 whatever address a process listens
on, so a rule cannot tell the master's packets from a slave's by address. It can by cgroup:
each drill process starts in its own cgroup v2 group (`CgroupSet.join_hook`, before it opens
a socket, because a socket keeps the cgroup of its creation), and iptables' `cgroup --path`
match knows which process sent a packet.

`Partition(a, b)` cuts every TCP connection between the members of `a` and those of `b`, in
both directions, established ones included:

    chain RMQDRILL-<tag>, jumped to from the top of OUTPUT for `-o lo`:
      -p tcp -m cgroup --path <a's group> --dport <b's port> -j CONNMARK --set-xmark MARK
      -p tcp -m cgroup --path <b's group> --dport <a's port> -j CONNMARK --set-xmark MARK
      ...                                                          (every pair)
      -m connmark --mark MARK -j DROP

Marking the connection (not the packet) also drops the server's answers, which leave the
server's cgroup towards the client's ephemeral port. Everything else (the drill's own clients,
other processes) passes. Every rule carries the comment `rmq-drill-<tag>`; `heal()` removes the
chain, and `remove_leftovers()` clears what a killed drill left behind.

`Redirect` is the same kind of rule in the nat table: one process's new connections to a port
go to another port (the slow-link drill's delaying proxy).

Needs root and a cgroup v2 hierarchy; `PartitionUnavailable` says what is missing.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Sequence

CHAIN_PREFIX = "RMQDRILL-"
COMMENT_PREFIX = "rmq-drill-"
MARK = "0x52d0000/0xffff0000"  # a byte of connmark the drill owns; other marks are kept


class PartitionUnavailable(Exception):
    """This machine cannot run partition drills (not root, no iptables, no cgroup v2)."""


def cgroup2_root() -> str:
    """The mount point of the cgroup v2 hierarchy."""
    with open("/proc/self/mounts", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 3 and fields[2] == "cgroup2":
                return fields[1]
    raise PartitionUnavailable("no cgroup v2 hierarchy is mounted")


def check_available() -> None:
    if os.geteuid() != 0:
        raise PartitionUnavailable("partition drills need root (iptables and cgroups)")
    if shutil.which("iptables") is None:
        raise PartitionUnavailable("partition drills need iptables")
    cgroup2_root()


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise PartitionUnavailable(f"iptables {' '.join(args)}: {done.stderr.strip()}")
    return done


class CgroupSet:
    """One cgroup per drill process under `<cgroup2 root>/rmq-drill-<tag>/`. Owns those
    directories; `close()` moves any process still inside back to the root group and removes
    them."""

    def __init__(self, tag: str) -> None:
        check_available()
        self.root = cgroup2_root()
        self.base = f"rmq-drill-{tag}"
        os.makedirs(os.path.join(self.root, self.base), exist_ok=True)

    def path(self, name: str) -> str:
        """The group's path relative to the hierarchy's root (what `--path` matches)."""
        return f"{self.base}/{name}"

    def join_hook(self, name: str) -> Callable[[], None]:
        """A subprocess `preexec_fn` that puts the child into group `name` before it runs."""
        directory = os.path.join(self.root, self.path(name))
        os.makedirs(directory, exist_ok=True)
        procs = os.path.join(directory, "cgroup.procs")

        def join() -> None:
            with open(procs, "w", encoding="ascii") as f:
                f.write(str(os.getpid()))
        return join

    def close(self) -> None:
        base = os.path.join(self.root, self.base)
        if not os.path.isdir(base):
            return
        for name in os.listdir(base):
            group = os.path.join(base, name)
            if not os.path.isdir(group):
                continue
            try:
                with open(os.path.join(group, "cgroup.procs"), encoding="ascii") as f:
                    pids = f.read().split()
                for pid in pids:  # still running (a drill stopped early): back to the root
                    with open(os.path.join(self.root, "cgroup.procs"), "w", encoding="ascii") as f:
                        f.write(pid)
                os.rmdir(group)
            except OSError:
                pass  # a process exiting right now: the group goes with remove_leftovers
        try:
            os.rmdir(base)
        except OSError:
            pass


@dataclass(frozen=True)
class Member:
    """A process as the firewall sees it: its cgroup path and the TCP port it listens on."""
    cgroup: str
    port: int


class Partition:
    """The rules cutting `a` from `b` (see the module docstring); apply() then heal()."""

    def __init__(self, tag: str, a: Sequence[Member], b: Sequence[Member]) -> None:
        if not a or not b:
            raise ValueError("a partition needs members on both sides")
        self.chain = f"{CHAIN_PREFIX}{tag}"[:28]  # iptables' chain-name limit
        self.comment = f"{COMMENT_PREFIX}{tag}"
        self.a, self.b = tuple(a), tuple(b)
        self.applied = False

    def rules(self) -> list[list[str]]:
        out = []
        for x in self.a:
            for y in self.b:
                for src, dst in ((x, y), (y, x)):
                    out.append(["-p", "tcp", "-m", "cgroup", "--path", src.cgroup,
                                "--dport", str(dst.port), "-m", "comment", "--comment",
                                self.comment, "-j", "CONNMARK", "--set-xmark", MARK])
        out.append(["-m", "connmark", "--mark", MARK, "-m", "comment", "--comment",
                    self.comment, "-j", "DROP"])
        return out

    def apply(self) -> None:
        _iptables("-N", self.chain)
        self.applied = True
        for rule in self.rules():
            _iptables("-A", self.chain, *rule)
        _iptables("-I", "OUTPUT", "1", "-o", "lo", "-m", "comment", "--comment", self.comment,
                  "-j", self.chain)

    def heal(self) -> None:
        if not self.applied:
            return
        _remove_chain(self.chain, self.comment)
        self.applied = False


class Redirect:
    """A firewall rule that sends the new TCP connections of the processes in `cgroup` to
    127.0.0.1:`port` on to 127.0.0.1:`to_port` instead (iptables' nat table, OUTPUT, REDIRECT):
    how the slow-link drill puts its DelayProxy between one slave and the master. Connections
    made before apply() are not affected (nat decides at a connection's first packet). The rule
    carries the comment `rmq-drill-<tag>`; `heal()` removes it, `remove_leftovers()` too."""

    def __init__(self, tag: str, cgroup: str, port: int, to_port: int) -> None:
        self.comment = f"{COMMENT_PREFIX}{tag}"
        self.rule = ["OUTPUT", "-o", "lo", "-p", "tcp", "-m", "cgroup", "--path", cgroup,
                     "--dport", str(port), "-m", "comment", "--comment", self.comment,
                     "-j", "REDIRECT", "--to-ports", str(to_port)]
        self.applied = False

    def apply(self) -> None:
        _iptables("-t", "nat", "-I", *self.rule)
        self.applied = True

    def heal(self) -> None:
        if self.applied:
            _iptables("-t", "nat", "-D", *self.rule, check=False)
            self.applied = False


def _remove_chain(chain: str, comment: str) -> None:
    while _iptables("-D", "OUTPUT", "-o", "lo", "-m", "comment", "--comment", comment,
                    "-j", chain, check=False).returncode == 0:
        pass
    _iptables("-F", chain, check=False)
    _iptables("-X", chain, check=False)


def remove_leftovers() -> list[str]:
    """Remove every drill chain (a drill killed before it healed); the chains removed."""
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        return []
    listing = _iptables("-S", check=False).stdout.splitlines()
    chains = [line.split()[1] for line in listing
              if line.startswith("-N ") and line.split()[1].startswith(CHAIN_PREFIX)]
    for chain in chains:
        _remove_chain(chain, COMMENT_PREFIX + chain[len(CHAIN_PREFIX):])
    redirects = [line for line in _iptables("-t", "nat", "-S", "OUTPUT", check=False)
                 .stdout.splitlines() if f"--comment {COMMENT_PREFIX}" in line
                 and line.startswith("-A OUTPUT")]
    for line in redirects:
        _iptables("-t", "nat", "-D", *shlex.split(line)[1:], check=False)
    return chains + [f"nat: {line}" for line in redirects]

"""The layout of `python -m cluster local`: which broker groups and nodes it runs, their names
and ports, and a base port whose whole layout is free.

Group k (0-based) is broker-a, broker-b, ... (brokerName), three nodes each: a master and two
slaves (brokerId 0, 1, 2). Group 0's nodes are named master, slave1, slave2 (as they always
were); group k's are <letter>-master, <letter>-slave1, <letter>-slave2 (b-master, ...).

Ports: group k's nodes listen on base + 100k, +10, +20 (group 0: base, base+10, base+20), each
serving Prometheus metrics on its port + 5; the one controller on base+30, the archive
(--archive) on base+40 (HTTP +41, metrics +45).
"""
from __future__ import annotations

import random
import socket
import string
from dataclasses import dataclass

from .local_archive import ARCHIVE_PORT_OFFSET

NODES = (("master", 0), ("slave1", 1), ("slave2", 2))  # (name in group 0, brokerId)
NODE_PORT_STEP = 10
GROUP_PORT_STRIDE = 100
MAX_GROUPS = 9  # group 9 ends below base+945: every layout fits under the ephemeral range
CONTROLLER_PORT_OFFSET = 30
METRICS_PORT_OFFSET = 5  # each process's Prometheus /metrics: its gRPC port + 5


@dataclass(frozen=True)
class LocalNode:
    """One node of the layout: its group (brokerName), its name in cluster.json, its
    brokerId and the port it listens on."""
    group: str
    name: str
    broker_id: int
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def check_groups(groups: int) -> int:
    """`groups` if it is 1..MAX_GROUPS, else ValueError saying so."""
    if isinstance(groups, bool) or not isinstance(groups, int) or \
            not 1 <= groups <= MAX_GROUPS:
        raise ValueError(f"--groups {groups!r}: want 1..{MAX_GROUPS} broker groups")
    return groups


def group_name(k: int) -> str:
    return f"broker-{string.ascii_lowercase[k]}"


def group_names(groups: int) -> list[str]:
    return [group_name(k) for k in range(check_groups(groups))]


def group_nodes(base_port: int, k: int) -> list[LocalNode]:
    """The three nodes of group k."""
    prefix = "" if k == 0 else f"{string.ascii_lowercase[k]}-"
    base = base_port + GROUP_PORT_STRIDE * k
    return [LocalNode(group_name(k), prefix + name, broker_id, base + NODE_PORT_STEP * i)
            for i, (name, broker_id) in enumerate(NODES)]


def layout(base_port: int, groups: int = 1) -> list[LocalNode]:
    """Every node of `groups` groups, group by group."""
    return [n for k in range(check_groups(groups)) for n in group_nodes(base_port, k)]


def used_offsets(groups: int = 1) -> list[int]:
    """Every port offset from the base port the layout listens on."""
    ports = [n.port for n in layout(0, groups)] + [CONTROLLER_PORT_OFFSET, ARCHIVE_PORT_OFFSET,
                                                   ARCHIVE_PORT_OFFSET + 1]
    return sorted({p + m for p in ports for m in (0, METRICS_PORT_OFFSET)})


def free_base_port(groups: int = 1) -> int:
    """A base port whose whole layout is free now (every node of `groups` groups, the
    controller and the archive, and each one's metrics). Chosen below the kernel's ephemeral
    range: a port there is never taken by an outgoing connection, so a node that a drill
    kills can restart on its ports (an ephemeral base port lost that race now and then), and
    above the ports the compose cluster publishes on the host (9090-10936) and those of a
    `cluster local` on its default base port (10911-11856 with every group), which may be up at
    the same time (the tests run on two workers)."""
    offsets = used_offsets(groups)
    low, high = 12000, _ephemeral_low()
    if high - low < 2000:  # an unusual range: anywhere below 60000 then
        high = 60000
    for _ in range(200):
        base = random.randrange(low, high - max(offsets))
        socks: list[socket.socket] = []
        try:
            for offset in offsets:
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + offset))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free base port found")


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default

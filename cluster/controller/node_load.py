"""A node's load as its heartbeat carries it (proto/controller.proto NodeLoad), as a plain
value: counters since the node's process started, the consumer lag of a master, disk usage.
The controller keeps the last one of each node with its report; the console samples them
(cluster/console/trends.py). Plain values, no protobuf: the servicer maps the message
(controller_servicer.load_from_pb)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class NodeLoad:
    """One node's load at one heartbeat. Counters (`sent_messages`, `delivered_messages`)
    count from the process start `started_ms`; `consumer_lag` is None when unknown (not the
    master, or its consumer state still loading); `disk_used_ratio` -1 when unknown."""

    started_ms: int = 0
    sent_messages: int = 0
    delivered_messages: int = 0
    consumer_lag: Mapping[str, int] | None = None
    disk_used_ratio: float = -1.0
    disk_warning_ratio: float = 0.0
    disk_max_used_ratio: float = 0.0


"""The client library (cluster/client) in tests: read back what a topic holds."""
from __future__ import annotations

from cluster.client import PullConsumer


def read_all(conn, topic: str) -> list:
    """Every message of every readable queue of `topic`, pulled from offset 0."""
    pc = PullConsumer(conn, "G")
    out = []
    for q in pc.queues(topic):
        offset = 0
        while True:
            r = pc.pull(topic, q, offset, 64)
            if not r.found:
                break
            out += r.messages
            offset = r.next_offset
    return out

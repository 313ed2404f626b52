"""The client library (cluster/client) in tests: fill a queue, read back what a topic holds."""
from __future__ import annotations

from cluster.client import Message, Producer, PullConsumer


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


def fill(conn, topic, tags, queue_group="q"):
    """One batch (one queue: one message group, unless queue_group is None) with one message per
    tag; its receipts."""
    return Producer(conn).send_batch([Message(topic, f"{t}-{i}".encode(), tag=t,
                                              message_group=queue_group)
                                      for i, t in enumerate(tags)])

"""Where each call of the node's client API runs: the one table, and the one way a coroutine hands
blocking work to the thread pool.

The server (grpc_server.py) runs a handler on its event loop when it is a coroutine function
and in its thread pool when it is a plain function; `EXECUTION` says which each method of
apache.rocketmq.v2.MessagingService and of BatchReceive (proto/batch_receive.proto) must be,
and tests/messaging/test_execution.py checks the servicers against it, so this table is what
a reader (or a tool) needs to know where a call runs.

    LOOP  a coroutine on the server's event loop. It never blocks the loop: what it waits for
          (the flush and replication policy of its writes, a long poll, the master's answer to
          a forward) is awaited, since the slaves' acks and the dispatches arrive through that
          same loop. Work that must block a thread goes through `in_pool`.
    POOL  a plain function in the thread pool: it may block (a bidirectional stream that a
          thread serves, calls whose work is only written for threads).

Which role answers (master, or a slave forwarding to its master) is decided inside each call
(cluster/config/node_role.py); it never changes where the call runs.
"""
from __future__ import annotations

import asyncio
import enum
from typing import Callable, TypeVar

T = TypeVar("T")


class Runs(enum.Enum):
    LOOP = "loop"
    POOL = "pool"


LOOP, POOL = Runs.LOOP, Runs.POOL

EXECUTION: dict[str, dict[str, Runs]] = {
    "apache.rocketmq.v2.MessagingService": {
        "QueryRoute": LOOP,
        "Heartbeat": LOOP,
        "NotifyClientTermination": LOOP,
        "SendMessage": LOOP,
        "QueryAssignment": LOOP,
        "ReceiveMessage": LOOP,
        "AckMessage": LOOP,
        "ChangeInvisibleDuration": LOOP,
        "ForwardMessageToDeadLetterQueue": LOOP,
        "UpdateOffset": LOOP,
        "GetOffset": LOOP,
        "QueryOffset": LOOP,
        "PullMessage": LOOP,
        "EndTransaction": LOOP,
        "RecallMessage": LOOP,
        "SyncLiteSubscription": LOOP,
        # a bidirectional stream served by a thread for its whole life (telemetry.py)
        "Telemetry": POOL,
    },
    "rmqstore.messaging.v1.BatchReceive": {
        "ReceiveMessages": LOOP,
        "AckAndReceive": LOOP,
    },
}


async def in_pool(fn: Callable[..., T], *args) -> T:
    """`fn(*args)` in the server's thread pool, awaited: the one way a LOOP call runs work that
    blocks a thread (a forward over the forwarder's blocking channel, a transaction's
    resolution, which waits in its thread). The call's context variables go along (the
    caller's signed headers, cluster/security/signature.py)."""
    return await asyncio.to_thread(fn, *args)

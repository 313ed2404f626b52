"""What every fuzzed call must leave true: a clear answer, nothing written by a refusal, and a
node that still serves a valid send and receive."""
from __future__ import annotations

import time

import grpc

from cluster.assembly.node import Node
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from tests.security.fuzz_strategies import check_rpc_error
from tests.support.nodes import settle
from tests.support.v2 import duration, msg

# v2 codes that say "done" (a write may have happened); every other code is a refusal.
DONE_CODES = frozenset({d.OK, d.MULTIPLE_RESULTS})
# Codes that mean the server failed, not that the request was refused.
FAILURE_CODES = frozenset({d.CODE_UNSPECIFIED, d.INTERNAL_ERROR, d.INTERNAL_SERVER_ERROR})


def written(node: Node) -> int:
    """Where the node's log ends: every write (messages, consumer-state and topic table
    events, transaction records) is an append to the commitlog, so an unchanged end means
    nothing was written, consume queues and replicated tables included."""
    return node.store.max_phy_offset()


class Watch:
    """Checks one call's answer against the node's log end before the call."""

    def __init__(self, node: Node) -> None:
        self.node = node
        settle(node)
        self.before = written(node)

    def clear(self, status: d.Status, what: str) -> bool:
        """The status is a clear answer (not a server failure, with a message); True when
        it says the call did its work."""
        assert status.code not in FAILURE_CODES, f"{what}: {status}"
        assert status.message, f"{what}: status {status.code} without a message"
        return status.code in DONE_CODES

    def status(self, status: d.Status, what: str) -> None:
        if not self.clear(status, what):
            self.nothing_written(f"{what} refused with {d.Code.Name(status.code)} "
                                 f"({status.message})")

    def error(self, e: grpc.RpcError, what: str) -> None:
        check_rpc_error(e, what)
        self.nothing_written(f"{what} failed with {e.code()} ({e.details()})")

    def nothing_written(self, what: str) -> None:
        assert written(self.node) == self.before, f"{what} but wrote " \
                                                  f"{written(self.node) - self.before} bytes"


def assert_serving(node: Node, stub, topic: str = "alive-T", group: str = "alive-G") -> None:
    """A valid send is stored and a valid receive delivers it."""
    body = f"alive-{time.monotonic_ns()}".encode()
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg(topic, body)]), timeout=10)
    assert r.status.code == d.OK, r.status
    settle(node)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        req = s.ReceiveMessageRequest(
            group=d.Resource(name=group), message_queue=d.MessageQueue(topic=d.Resource(name=topic)),
            batch_size=32, filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
            invisible_duration=duration(30), long_polling_timeout=duration(1))
        got = [x.message for x in stub.ReceiveMessage(req, timeout=10) if x.HasField("message")]
        if any(m.body == body for m in got):
            return
    raise AssertionError("the node no longer delivers what it stores")

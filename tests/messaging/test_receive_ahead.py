"""ReceiveAhead (cluster/client/receive_ahead.py) against real nodes: AckAndReceive calls kept
in flight. Every message is handed out once and acked once (nothing comes back past the
invisibility), the calls really are in flight before take() asks (the node has handed out
depth batches), close() makes what no take handed out visible again at once and acks only
what the caller passed back, and a server without AckAndReceive gets one ack_and_receive per
take and no receive at close.

The nodes run by a ManualClock: a delivery comes back only when a test advances the clock."""
from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from cluster.client import Message, Producer, ReceiveAhead, SimpleConsumer
from tests.support.nodes import methods_called, settle

INVISIBLE = 30  # seconds


def filled(nodes, clock, n: int, **connect):
    node = nodes.start(clock=clock)
    conn = nodes.connect(node, **connect)
    Producer(conn).send_batch([Message("T", b"%d" % i) for i in range(n)])
    settle(node)
    return node, SimpleConsumer(conn, "CG", {"T": "*"}, await_duration=0,
                                invisible_duration=INVISIBLE)


@pytest.mark.parametrize("batch_receive", [True, False])
def test_every_message_once_and_all_acked(nodes, clock, batch_receive):
    node, consumer = filled(nodes, clock, 100, batch_receive=batch_receive)
    ahead = ReceiveAhead(consumer, max_messages=8, depth=3)
    got, done = [], []
    while True:
        batch = ahead.take(done)  # acks `done`
        if not batch:
            break
        got += batch
        done = batch
    ahead.close()
    assert sorted(m.body for m in got) == sorted(b"%d" % i for i in range(100))
    assert ahead.acked == 100 and ahead.ack_errors == []
    clock.advance(INVISIBLE + 1)
    assert consumer.receive(32) == []
    used = methods_called(node)
    assert ("AckAndReceive" in used) is batch_receive
    assert ("AckMessage" in used) is not batch_receive


def test_the_calls_are_in_flight_before_take(nodes, clock):
    """With depth 2, the node hands out two batches before the first take: another consumer
    of the group finds only what is left."""
    _, consumer = filled(nodes, clock, 12)
    ahead = ReceiveAhead(consumer, max_messages=4, depth=2)
    other = SimpleConsumer(consumer.connection, "CG", {"T": "*"}, await_duration=0)
    for call in ahead._calls:  # both answered before anything is taken
        call.future.result(timeout=10)
    left = other.receive(32, INVISIBLE)
    assert len(left) == 4  # 12 - two batches of 4 handed out ahead
    first = ahead.take()
    assert len(first) == 4
    ahead.close(first)
    other.ack_many(left)


def test_close_makes_what_no_take_handed_out_visible_at_once(nodes, clock):
    _, consumer = filled(nodes, clock, 12)
    ahead = ReceiveAhead(consumer, max_messages=4, depth=2)
    first = ahead.take()  # a third call goes out with it
    ahead.close()  # `first` not passed back: not acked
    assert ahead.acked == 0 and ahead.ack_errors == []
    # without advancing the clock: the two batches no take handed out are visible again
    again = consumer.receive(32, INVISIBLE)
    assert len(again) == 8 and not {m.body for m in again} & {m.body for m in first}
    consumer.ack_many(again)
    clock.advance(INVISIBLE + 1)
    back = consumer.receive(32, INVISIBLE)  # `first` was never acked: it comes back
    assert sorted(m.body for m in back) == sorted(m.body for m in first)


def test_a_failed_ack_is_noted_and_the_rest_go_on(nodes, clock):
    """An ack that the node refuses (its handle was replaced by ChangeInvisibleDuration) is
    kept in ack_errors; the other acks and receives go on."""
    _, consumer = filled(nodes, clock, 8)
    ahead = ReceiveAhead(consumer, max_messages=4, depth=1)
    batch = ahead.take()
    stale = batch[0].receipt_handle
    consumer.change_invisible_duration(batch[0], INVISIBLE)
    batch[0].receipt_handle = stale
    second = ahead.take(batch)
    assert len(second) == 4
    ahead.take(second)
    ahead.close()
    assert ahead.acked == 7
    assert [m.body for m, _ in ahead.ack_errors] == [batch[0].body]


def test_depth_must_be_positive(nodes, clock):
    _, consumer = filled(nodes, clock, 1)
    with pytest.raises(ValueError):
        ReceiveAhead(consumer, depth=0)


def test_a_call_still_long_polling_does_not_hold_up_a_younger_answer(nodes):
    """Topics in turn: the first call long-polls the empty topic A (2 s), the second finds B's
    messages at once; take() hands those out without waiting for A's poll to end. (A node on
    the real clock: its long polls end by it.)"""
    node = nodes.start()
    conn = nodes.connect(node)
    Producer(conn).send(Message("A", b"create"))
    Producer(conn).send_batch([Message("B", b"b%d" % i) for i in range(3)])
    settle(node)
    SimpleConsumer(conn, "CG", {"A": "*"}, await_duration=0).ack_many(
        SimpleConsumer(conn, "CG", {"A": "*"}, await_duration=0).receive(8, INVISIBLE))
    consumer = SimpleConsumer(conn, "CG", {"A": "*", "B": "*"}, await_duration=2,
                              invisible_duration=INVISIBLE)
    ahead = ReceiveAhead(consumer, max_messages=8, depth=2)
    got = ahead.take()  # taken in call order, this would be A's empty answer, 2 s later
    assert sorted(m.body for m in got) == [b"b0", b"b1", b"b2"]
    assert not all(c.future.done() for c in ahead._calls)  # A's poll still waits
    ahead.close(got)
    assert ahead.acked == 3


class _WithoutAckAndReceive(grpc.GenericRpcHandler):
    """A server in front of a node that passes every call's bytes on to it, except
    AckAndReceive, which it does not know (UNIMPLEMENTED): a server of the v2 calls only."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.channel = channel

    def service(self, details):
        method = details.method
        if method.endswith("/AckAndReceive"):
            return None
        if method.endswith("/ReceiveMessage"):  # the v2 receive streams its answer
            upstream = self.channel.unary_stream(method)
            return grpc.unary_stream_rpc_method_handler(
                lambda request, context: upstream(request, metadata=context.invocation_metadata()))
        upstream_unary = self.channel.unary_unary(method)
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: upstream_unary(request,
                                                    metadata=context.invocation_metadata()))


def test_close_on_a_server_without_ack_and_receive_receives_nothing_more(nodes, clock):
    """The calls sent ahead come back UNIMPLEMENTED: a take makes its call again as
    ack_and_receive (AckMessage + ReceiveMessages); close() only acks what its calls carried,
    it does not receive once more to release it at once."""
    node, _ = filled(nodes, clock, 12)
    channel = grpc.insecure_channel(node.address)
    server = grpc.server(futures.ThreadPoolExecutor(8))
    server.add_generic_rpc_handlers((_WithoutAckAndReceive(channel),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        conn = nodes.connect(f"127.0.0.1:{port}")
        consumer = SimpleConsumer(conn, "CG", {"T": "*"}, await_duration=0,
                                  invisible_duration=INVISIBLE)
        before = receives(node)
        ahead = ReceiveAhead(consumer, max_messages=4, depth=2)
        first = ahead.take()
        second = ahead.take(first)
        assert len(first) == len(second) == 4
        ahead.close(second)
        assert ahead.acked == 8 and ahead.ack_errors == []
        assert receives(node) - before == 2  # one per take, none at close
        left = consumer.receive(32, INVISIBLE)  # the rest was never handed out
        assert len(left) == 4
    finally:
        server.stop(None)
        channel.close()


def receives(node) -> int:
    return sum(n for (method, _), n in node.calls.snapshot().items()
               if method.rpartition("/")[2] in ("ReceiveMessage", "ReceiveMessages"))

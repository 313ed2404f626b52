"""Receives kept ahead: one SimpleConsumer's AckAndReceive calls (proto/batch_receive.proto),
`depth` of them in flight at once, so the node plans, reads and answers the next batch while
this process handles the current one. A consumer that waits for each answer before asking
again leaves the node idle while it works, and itself idle while the node does; with two calls
in flight one consumer consumed about 1.3x as fast (docs/performance/history.md, "Receives kept
ahead"). RocketMQ's push consumer keeps a queue of pulled messages for the same reason.

    ahead = ReceiveAhead(consumer, max_messages=32, depth=2)
    done = []
    while running:
        batch = ahead.take(done)  # the oldest answer; `done` rides on a new call
        handle(batch)
        done = batch
    ahead.close(done)

- take(acked) sends a new call, which acks `acked` (messages of earlier takes the caller is done
  with) and asks for one more batch, then hands out the messages of the oldest call answered
  (waiting for one): a call still long-polling does not hold up what a younger one brought.
  So batches may come out of queue order when two answers cross, which a SimpleConsumer never
  promised (a FIFO group's next message is handed out only once the previous one is acked).
  Each ack is applied when its call reaches the node, and its result comes back with that
  call's answer, up to `depth` takes later: successes are counted in `acked`, failures kept in
  `ack_errors` as (message, error). Acks of several topics: one AckAndReceive carries one topic's, the others
  are sent at once with ack_many.
- A message is invisible from when its call was answered, so it may wait here for up to depth
  answers before a take hands it out: keep depth small against the invisible duration.
- close(acked) sends the last acks, waits for the calls in flight (a long poll among them ends
  within its await duration) and makes every message they answered, which no take handed out,
  visible again at once (ChangeInvisibleDuration 0) instead of leaving it invisible for the
  whole duration. Nothing is acked that no take handed out and the caller passed back.
- A call that fails raises from the take that waits for it (TransportError: the outcome of its
  acks is unknown; ReceiveAfterAckError: its acks' results, also noted here); the other calls
  stay in flight and close() still settles them.
- Where AckAndReceive is not served (ClientConfig.batch_receive off, or a server without it:
  UNIMPLEMENTED, which changed nothing there) each take is one ack_and_receive, nothing ahead.

One thread uses a ReceiveAhead (no lock).
"""
from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import grpc

from cluster.client.client_errors import ClientError, ReceiveAfterAckError, TransportError
from cluster.client.message import ReceivedMessage
from cluster.client.simple_consumer import SimpleConsumer, ack_and_receive_answer

METHOD = "AckAndReceive"


@dataclass
class _Call:
    """One AckAndReceive sent ahead (future None: not sent, done by ack_and_receive when
    taken) and the messages it acks (one topic)."""
    acked: list[ReceivedMessage]
    future: grpc.Future | None
    what: str


class ReceiveAhead:
    """Keeps `depth` receives of one SimpleConsumer in flight (the module doc). Owns the calls
    in flight and the ack tallies (`acked`, `ack_errors`)."""

    def __init__(self, consumer: SimpleConsumer, max_messages: int = 32, depth: int = 2, *,
                 invisible_duration: float | None = None, topic: str | None = None,
                 await_duration: float | None = None) -> None:
        if depth < 1:
            raise ValueError("depth must be at least 1")
        self.consumer = consumer
        self.max_messages = max_messages
        self.depth = depth
        self._receive = dict(invisible_duration=invisible_duration, topic=topic,
                             await_duration=await_duration)
        self.acked = 0
        self.ack_errors: list[tuple[ReceivedMessage, ClientError]] = []
        self._calls: list[_Call] = []  # oldest first
        self._answered = threading.Condition()  # notified by gRPC's thread as calls finish
        self._closed = False
        for _ in range(depth):
            self._send([])

    def take(self, acked: Sequence[ReceivedMessage] = ()) -> list[ReceivedMessage]:
        """Send a call that acks `acked` and asks for one more batch, then the messages of the
        oldest call that has its answer ([] when its long poll ended empty)."""
        if self._closed:
            raise ValueError("this ReceiveAhead is closed")
        self._send(acked)
        return self._answer(self._first_answered())

    def close(self, acked: Sequence[ReceivedMessage] = ()) -> None:
        """Ack `acked`, settle the calls in flight, and make what they answered and no take
        handed out visible again at once. Errors of those calls are noted, not raised."""
        if self._closed:
            return
        self._closed = True
        if acked:
            self._note(list(acked), self.consumer.ack_many(acked))
        while self._calls:
            call = self._calls.pop(0)
            if call.future is None:  # never sent: only its acks are due
                self._note(call.acked, self.consumer.ack_many(call.acked))
                continue
            try:
                unhanded = self._answer(call, receive=False)
            except ClientError:
                continue  # noted, or unknown; what it may have handed out expires by itself
            for message in unhanded:
                try:
                    self.consumer.change_invisible_duration(message, 0)
                except ClientError:
                    pass  # it becomes visible when its invisible duration ends

    def __enter__(self) -> "ReceiveAhead":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- calls ----------------------------------------------------------------------------------
    def _send(self, acked: Sequence[ReceivedMessage]) -> None:
        by_topic: dict[str, list[ReceivedMessage]] = defaultdict(list)
        for message in acked:
            by_topic[message.topic].append(message)
        carried = by_topic.pop(next(iter(by_topic)), []) if by_topic else []
        for others in by_topic.values():  # one AckAndReceive acks one topic's
            self._note(others, self.consumer.ack_many(others))
        request, timeout, what = self.consumer.ack_and_receive_request(
            carried, self.max_messages, **self._receive)
        future = self.consumer.connection.batch_future(METHOD, request, timeout)
        if future is not None:
            future.add_done_callback(self._notify)
        self._calls.append(_Call(carried, future, what))

    def _notify(self, _future) -> None:
        with self._answered:
            self._answered.notify_all()

    def _first_answered(self) -> _Call:
        """The oldest call that has its answer, waiting for one when none has (a call not
        sent, without AckAndReceive, is done when taken), so a call still long-polling does
        not hold up what a younger one brought (the module doc)."""
        with self._answered:
            while True:
                for i, call in enumerate(self._calls):
                    if call.future is None or call.future.done():
                        return self._calls.pop(i)
                self._answered.wait()

    def _answer(self, call: _Call, receive: bool = True) -> list[ReceivedMessage]:
        """The call's messages, its acks' results noted. A call the server did not serve
        (UNIMPLEMENTED: nothing happened there) is made again as ack_and_receive, or only as
        its acks without `receive` (close: a receive then would only be released)."""
        connection = self.consumer.connection
        answer = None
        if call.future is not None:
            try:
                answer = call.future.result()
            except grpc.RpcError as e:
                if e.code() is not grpc.StatusCode.UNIMPLEMENTED:
                    raise TransportError.from_rpc_error(e, METHOD,
                                                        connection.config.target) from None
                connection.batch_unserved(METHOD)
        if answer is None and not receive:
            self._note(call.acked, self.consumer.ack_many(call.acked))
            return []
        try:
            if answer is None:  # not served: the acks and the receive as their own calls
                results, messages = self.consumer.ack_and_receive(
                    call.acked, self.max_messages, **self._receive)
            else:
                ack_topic = call.acked[0].topic if call.acked else ""
                results, messages = ack_and_receive_answer(answer, call.acked, ack_topic,
                                                           call.what)
        except ReceiveAfterAckError as e:
            self._note(call.acked, e.ack_results)
            raise
        self._note(call.acked, results)
        return messages

    def _note(self, acked: list[ReceivedMessage], results: Sequence[ClientError | None]) -> None:
        for message, error in zip(acked, results):
            if error is None:
                self.acked += 1
            else:
                self.ack_errors.append((message, error))

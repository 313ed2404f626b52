"""SimpleConsumer: the server tracks what the group consumed. ReceiveMessage hands out messages
that stay invisible to the group for `invisible_duration` seconds; AckMessage with the receipt
handle marks one done; otherwise it comes back with delivery_attempt + 1.
ChangeInvisibleDuration extends (or ends) the invisibility and answers a NEW receipt handle (the
old one is refused from then on): this client stores it in the message.

ReceiveMessage is a server stream: a status first (OK, or MESSAGE_NOT_FOUND when the long poll
ended empty), then a delivery timestamp and the messages. Where the server has it, this client
asks for the same answer in one response instead (ReceiveMessages, proto/batch_receive.proto:
a streamed message costs both ends a gRPC round of its own); ClientConfig.batch_receive=False
keeps the stream. `ack_and_receive` acks the previous answer and receives the next in one
round trip (AckAndReceive of the same proto), where the server has it. The server long-polls
within `await_duration`; the call's deadline is request_timeout + await_duration, like the official
clients', so the server always answers before the client gives up. Like them, each receive
names a queue of the topic (rotating over the route's readable queues) and the server starts
there and continues over the other queues.
"""
from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from typing import Mapping, Sequence

from proto import batch_receive_pb2 as br
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from cluster.client.connection import Connection
from cluster.client.client_errors import ClientError, ReceiveAfterAckError, check
from cluster.client.message import ReceivedMessage, from_v2
from cluster.client.pull_consumer import duration, tag_filter


class SimpleConsumer:
    """A consumer group's SimpleConsumer over one Connection (the module docstring): owns the
    subscriptions, the default await and invisible durations and the rotation over topics
    and over each topic's readable queues. Receipt handles live in the messages it returns.

    May be shared by threads: `_lock` guards the two rotations (the topic cycle and each
    topic's turn counter); the calls themselves go through the Connection."""

    def __init__(self, connection: Connection, group: str, subscriptions: Mapping[str, str],
                 await_duration: float = 20.0, invisible_duration: float = 30.0) -> None:
        """subscriptions: topic -> tag expression ("*", "a||b")."""
        if not group:
            raise ValueError("a simple consumer needs a consumer group")
        if not subscriptions:
            raise ValueError("subscribe to at least one topic")
        if await_duration < 0 or invisible_duration < 0:
            raise ValueError("await_duration and invisible_duration must be >= 0")
        self.connection = connection
        self.group = group
        self.subscriptions = dict(subscriptions)
        self.await_duration = await_duration
        self.invisible_duration = invisible_duration
        self._topics = itertools.cycle(sorted(self.subscriptions))
        self._turn: dict[str, itertools.count] = defaultdict(itertools.count)
        self._lock = threading.Lock()

    def _next_queue(self, topic: str) -> d.MessageQueue:
        queues = [q for q in self.connection.route(topic) if q.permission in (d.READ, d.READ_WRITE)]
        if not queues:
            raise ClientError(d.FORBIDDEN, f"topic {topic} has no readable queue")
        with self._lock:
            turn = next(self._turn[topic])
        return queues[turn % len(queues)]

    def receive(self, max_messages: int = 16, invisible_duration: float | None = None,
                topic: str | None = None, await_duration: float | None = None
                ) -> list[ReceivedMessage]:
        """Up to max_messages (the server's limit is 1024), [] when none came within the long
        poll. `topic` defaults to the subscribed topics in turn."""
        return self._receive(*self._receive_request(max_messages, invisible_duration, topic,
                                                    await_duration))

    def ack_and_receive(self, acked: Sequence[ReceivedMessage], max_messages: int = 16,
                        invisible_duration: float | None = None, topic: str | None = None,
                        await_duration: float | None = None
                        ) -> tuple[list[ClientError | None], list[ReceivedMessage]]:
        """ack_many(acked), then receive(...), in one round trip where the server has
        AckAndReceive (proto/batch_receive.proto), else as those two calls: (each ack's result
        as ack_many's, the messages received). The acks are applied first and stand whatever
        the receive answers: a receive that fails after them raises ReceiveAfterAckError,
        which carries their results."""
        acked = list(acked)
        request, timeout, what = self._receive_request(max_messages, invisible_duration, topic,
                                                       await_duration)
        topics = {m.topic for m in acked}
        answer = None
        if len(topics) == 1:  # AckAndReceive carries one AckMessage: one topic
            ack_topic = topics.pop()
            ack = self._ack_request(ack_topic, acked)
            answer = self.connection.batch_call(
                "AckAndReceive", br.AckAndReceiveRequest(receive=request, ack=ack), timeout)
        if answer is None:  # several topics, none, or a server without AckAndReceive
            results = self.ack_many(acked)
            try:
                return results, self._receive(request, timeout, what)
            except ClientError as e:
                raise ReceiveAfterAckError(e.code, e.message, results) from None
        return ack_and_receive_answer(answer, acked, ack_topic, what)

    def ack_and_receive_request(self, acked: Sequence[ReceivedMessage], max_messages: int,
                                invisible_duration: float | None = None,
                                topic: str | None = None, await_duration: float | None = None
                                ) -> tuple[br.AckAndReceiveRequest, float, str]:
        """The AckAndReceive request of `ack_and_receive` (acks of one topic, or none: it
        carries one AckMessage), its deadline and what it is (for errors); receive_ahead.py
        sends it in flight."""
        if len({m.topic for m in acked}) > 1:
            raise ValueError("one AckAndReceive acks messages of one topic")
        request, timeout, what = self._receive_request(max_messages, invisible_duration, topic,
                                                       await_duration)
        out = br.AckAndReceiveRequest(receive=request)
        if acked:
            out.ack.CopyFrom(self._ack_request(acked[0].topic, acked))
        return out, timeout, what

    def _receive(self, request: s.ReceiveMessageRequest, timeout: float, what: str
                 ) -> list[ReceivedMessage]:
        answer = self.connection.batch_call("ReceiveMessages", request, timeout)
        if answer is not None:  # one response (proto/batch_receive.proto)
            return _received(answer, what)
        responses = self.connection.stream("ReceiveMessage", request, timeout)
        if not responses or responses[0].WhichOneof("content") != "status":
            raise ClientError(d.INTERNAL_ERROR, f"{what}: the answer does not start with a "
                                                f"status")
        status = responses[0].status
        if status.code == d.MESSAGE_NOT_FOUND:
            return []
        check(status, what)
        return [from_v2(r.message) for r in responses[1:] if r.WhichOneof("content") == "message"]

    def _receive_request(self, max_messages: int, invisible_duration: float | None,
                         topic: str | None, await_duration: float | None
                         ) -> tuple[s.ReceiveMessageRequest, float, str]:
        """The receive's request, its deadline and what it is (for errors)."""
        if topic is None:
            with self._lock:
                topic = next(self._topics)
        elif topic not in self.subscriptions:
            raise ValueError(f"not subscribed to topic {topic}")
        wait = self.await_duration if await_duration is None else await_duration
        invisible = self.invisible_duration if invisible_duration is None else invisible_duration
        request = s.ReceiveMessageRequest(
            group=self.connection.resource(self.group), message_queue=self._next_queue(topic),
            filter_expression=tag_filter(self.subscriptions[topic]), batch_size=max_messages,
            invisible_duration=duration(invisible), long_polling_timeout=duration(wait),
            auto_renew=False)
        return (request, self.connection.config.request_timeout + wait,
                f"receive from {topic} for group {self.group}")

    def ack(self, message: ReceivedMessage) -> None:
        error = self.ack_many([message])[0]
        if error is not None:
            raise error

    def ack_many(self, messages: Sequence[ReceivedMessage]) -> list[ClientError | None]:
        """Ack several messages (one AckMessage per topic); per message None or its error."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for i, m in enumerate(messages):
            by_topic[m.topic].append(i)
        out: list[ClientError | None] = [None] * len(messages)
        for topic, indexes in by_topic.items():
            some = [messages[i] for i in indexes]
            answer = self.connection.call("AckMessage", self._ack_request(topic, some))
            for i, result in zip(indexes, _ack_results(answer, some, topic)):
                out[i] = result
        return out

    def _ack_request(self, topic: str, messages: Sequence[ReceivedMessage]
                     ) -> s.AckMessageRequest:
        return s.AckMessageRequest(
            group=self.connection.resource(self.group), topic=self.connection.resource(topic),
            entries=[s.AckMessageEntry(message_id=m.message_id, receipt_handle=m.receipt_handle)
                     for m in messages])

    def change_invisible_duration(self, message: ReceivedMessage, seconds: float) -> str:
        """Invisible for `seconds` from now (0: visible again at once); the message gets the new
        receipt handle, which is also returned."""
        answer = self.connection.call("ChangeInvisibleDuration", s.ChangeInvisibleDurationRequest(
            group=self.connection.resource(self.group),
            topic=self.connection.resource(message.topic),
            receipt_handle=message.receipt_handle, invisible_duration=duration(seconds),
            message_id=message.message_id))
        check(answer.status, f"change invisible duration of {message.message_id}")
        message.receipt_handle = answer.receipt_handle
        message.invisible_duration_ms = int(seconds * 1000)
        return answer.receipt_handle


def ack_and_receive_answer(answer: br.ReceiveMessagesResponse, acked: Sequence[ReceivedMessage],
                           ack_topic: str, what: str
                           ) -> tuple[list[ClientError | None], list[ReceivedMessage]]:
    """(each ack's result, the messages received) of an AckAndReceive answer; a receive that
    failed after the acks raises ReceiveAfterAckError with their results."""
    if answer.HasField("ack"):
        results = _ack_results(answer.ack, acked, ack_topic)
    else:  # the whole call was refused before the ack was applied
        results = [ClientError.from_status(answer.status, f"ack on {ack_topic}")] * len(acked)
    try:
        return results, _received(answer, what)
    except ClientError as e:
        raise ReceiveAfterAckError(e.code, e.message, results) from None


def _received(answer: br.ReceiveMessagesResponse, what: str) -> list[ReceivedMessage]:
    """The messages of a one-response receive; [] when the long poll ended empty."""
    if answer.status.code == d.MESSAGE_NOT_FOUND:
        return []
    check(answer.status, what)
    return [from_v2(m) for m in answer.messages]


def _ack_results(answer: s.AckMessageResponse, messages: Sequence[ReceivedMessage],
                 topic: str) -> list[ClientError | None]:
    """Per message None or its error, from one AckMessage answer (entries in request order)."""
    if answer.status.code not in (d.OK, d.MULTIPLE_RESULTS) or \
            len(answer.entries) != len(messages):
        error = ClientError.from_status(answer.status, f"ack on {topic}")
        return [error] * len(messages)
    return [None if entry.status.code == d.OK else
            ClientError.from_status(entry.status, f"ack of {entry.message_id}")
            for entry in answer.entries]

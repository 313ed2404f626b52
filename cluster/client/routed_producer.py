"""RoutedProducer: sends over the queues of every broker group a topic's route lists, as the
official clients do (docs: broker groups, "Route rules").

QueryRoute on any node answers the topic's queues in every group that has it, each naming its
group (broker name) and that group's endpoints. The producer keeps the writable queues of
broker id 0 in route order (the groups interleaved: a0, b0, a1, b1, ...), opens one Connection
per distinct endpoints (the sorted addresses) and sends round-robin: each send goes to the
group that owns the next queue (that group's master picks the queue itself: SendResultEntry
does not name it). A message group (FIFO) always maps to the same queue (sha256 of the group
modulo the writable queues, the Python client's rule) and is never moved to another group.

`SendPlan` is the decision logic, a plain object: which group a send tries next, and whether a
failure moves the send to another group. A send answered with a refusal that stored nothing
(one of the Producer's retryable codes, e.g. INTERNAL_SERVER_ERROR from a group whose master
is gone, after the Producer's own retries there; never bad input) is tried once more
on the next queue of another group, up to `max_attempts` groups. An unanswered send
(TransportError) or a stored-but-not-durable one (NotDurableError) is never moved: it may be
stored, and another group's duplicate window would not know it (the official client moves
those too, keeping the message id).

The route is refreshed after `route_ttl` (ClientConfig) and whenever a send found no writable
queue.
"""
from __future__ import annotations

import dataclasses
import hashlib
import threading
from dataclasses import dataclass
from typing import Sequence

from proto.apache.rocketmq.v2 import definition_pb2 as d

from cluster.client.client_errors import ClientError, NotDurableError, TransportError
from cluster.client.connection import ClientConfig, Connection
from cluster.client.message import Message, SendReceipt
from cluster.client.producer import RETRYABLE_CODES, Producer, RetryPolicy

WRITABLE = (d.WRITE, d.READ_WRITE)


@dataclass(frozen=True)
class RoutedQueue:
    """One writable queue of the route: its group (broker name), id and the group's endpoints
    ("a:p;b:p", sorted)."""
    broker_name: str
    queue_id: int
    endpoints: str


def writable_queues(queues: Sequence[d.MessageQueue]) -> list[RoutedQueue]:
    """The queues a producer sends to: broker id 0, writable, in route order."""
    out = []
    for q in queues:
        if q.broker.id != 0 or q.permission not in WRITABLE:
            continue
        addresses = sorted(f"{a.host}:{a.port}" for a in q.broker.endpoints.addresses)
        out.append(RoutedQueue(q.broker.name, q.id, ";".join(addresses)))
    return out


@dataclass(frozen=True)
class RoutedReceipt:
    """A stored send: its receipt, the group that stored it and the groups whose attempts
    were refused before (empty when the first group stored it)."""
    receipt: SendReceipt
    broker_name: str
    refused_by: tuple[str, ...] = ()

    @property
    def message_id(self) -> str:
        return self.receipt.message_id


class RoutedSendError(ClientError):
    """The send's last error (its code and message), with the group of each attempt:
    `refused_by` the groups that refused it, `broker_name` the group of the last attempt ("" if
    no queue was writable)."""

    def __init__(self, error: ClientError, broker_name: str, refused_by: Sequence[str]) -> None:
        super().__init__(error.code, f"{broker_name or 'no group'}: {error.message}")
        self.cause = error
        self.broker_name = broker_name
        self.refused_by = tuple(refused_by)


def moves_to_another_group(error: ClientError) -> bool:
    """A refusal before anything was written that another group may not give (the Producer's
    own retryable codes: TOO_MANY_REQUESTS, HA_NOT_AVAILABLE, INTERNAL_SERVER_ERROR). Not an
    unanswered or not-durable send (it may be stored), nor bad input: a message refused as
    illegal (an id reused with another body, a body too large) is refused by every group, and
    another group's duplicate window would not know the original."""
    return (not isinstance(error, (NotDurableError, TransportError))
            and error.code in RETRYABLE_CODES)


class SendPlan:
    """Which queue each send tries: a round-robin position over the writable queues (or a
    message group's fixed queue) and, after a refusal, the next queue of another group. Owns
    the position; `lock` guards it (senders share one plan)."""

    def __init__(self, max_attempts: int = 3) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, not {max_attempts}")
        self.max_attempts = max_attempts
        self.lock = threading.Lock()
        self._next = 0

    def first(self, queues: Sequence[RoutedQueue], message_group: str | None) -> int:
        """The index (in `queues`, not empty) of a send's first attempt."""
        if message_group:
            digest = hashlib.sha256(message_group.encode("utf-8")).digest()
            return int.from_bytes(digest[:8], "big") % len(queues)
        with self.lock:
            index = self._next % len(queues)
            self._next += 1
        return index

    def next_after(self, queues: Sequence[RoutedQueue], index: int,
                   tried: Sequence[str]) -> int | None:
        """The next queue after `index` whose group was not tried yet (None: no such group)."""
        for step in range(1, len(queues) + 1):
            candidate = (index + step) % len(queues)
            if queues[candidate].broker_name not in tried:
                return candidate
        return None


class RoutedProducer:
    """Sends through the groups of each topic's route (see the module docstring). Owns its
    bootstrap Connection (routes) and one Connection per group endpoints; `_lock` guards the
    connection map. Thread-safe; close() closes every connection."""

    def __init__(self, config: ClientConfig, retry: RetryPolicy = RetryPolicy(),
                 max_attempts: int = 3) -> None:
        self.config = config
        self.retry = retry
        self.plan = SendPlan(max_attempts)
        self.bootstrap = Connection(config)
        self._lock = threading.Lock()
        self._connections: dict[str, Connection] = {}

    def queues(self, topic: str, refresh: bool = False) -> list[RoutedQueue]:
        return writable_queues(self.bootstrap.route(topic, refresh=refresh))

    def connection(self, endpoints: str) -> Connection:
        with self._lock:
            conn = self._connections.get(endpoints)
            if conn is None:
                conn = Connection(dataclasses.replace(self.config, endpoints=endpoints))
                self._connections[endpoints] = conn
            return conn

    def send(self, msg: Message, timeout: float | None = None) -> RoutedReceipt:
        """The receipt and the group that stored it, or RoutedSendError."""
        queues = self.queues(msg.topic)
        if not queues:
            queues = self.queues(msg.topic, refresh=True)
        if not queues:
            raise RoutedSendError(ClientError(d.FORBIDDEN, f"topic {msg.topic}: no writable "
                                                           f"queue in any group"), "", ())
        index: int | None = self.plan.first(queues, msg.message_group)
        refused: list[str] = []
        while True:
            assert index is not None
            queue = queues[index]
            try:
                producer = Producer(self.connection(queue.endpoints), retry=self.retry)
                receipt = producer.send(msg, timeout)
                return RoutedReceipt(receipt, queue.broker_name, tuple(refused))
            except ClientError as e:
                error = e
            if not moves_to_another_group(error) or msg.message_group:
                raise RoutedSendError(error, queue.broker_name, refused)
            refused.append(queue.broker_name)
            index = self.plan.next_after(queues, index, refused) \
                if len(refused) < self.plan.max_attempts else None
            if index is None:
                raise RoutedSendError(error, queue.broker_name, refused[:-1])

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close()
        self.bootstrap.close()

    def __enter__(self) -> "RoutedProducer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

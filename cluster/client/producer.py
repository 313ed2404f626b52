"""Producer: SendMessage with one message, or with a batch (one topic, one request = one append
on the master, so the batch is stored in one piece or not at all).

Retries (`RetryPolicy`) only what the server answered WITHOUT storing anything: a response
whose status is one of `RETRYABLE_CODES` and that carries no entries. The server adds one entry
per message exactly when the batch was appended (cluster/messaging/send.py), so:
  - TOO_MANY_REQUESTS (the page cache is busy, refused before writing)        retried
  - HA_NOT_AVAILABLE without entries (fewer replicas in sync than
    minInSyncReplicas, refused before writing)                                retried
  - INTERNAL_SERVER_ERROR without entries (the node is changing role, a slave
    has no master to forward to or could not reach it)                        retried
  - MASTER_PERSISTENCE_TIMEOUT, SLAVE_PERSISTENCE_TIMEOUT, HA_NOT_AVAILABLE
    with entries, any status with entries                                     never: the
    message is stored; NotDurableError carries its receipts
  - validation codes (ILLEGAL_*, MESSAGE_BODY_*, ...)                         never
  - no answer at all (TransportError: deadline, connection lost)              never: the
    outcome is unknown; the caller decides (a resend keeps the message id)
A slave that forwarded the write and lost its master's answer says so with PROXY_TIMEOUT
("outcome unknown", never retried here); INTERNAL_SERVER_ERROR from a slave means the request
never reached a master.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from cluster.client.connection import Connection
from cluster.client.client_errors import ClientError, NotDurableError
from cluster.client.message import Message, SendReceipt, receipts_of, to_v2

RETRYABLE_CODES = frozenset({d.TOO_MANY_REQUESTS, d.HA_NOT_AVAILABLE, d.INTERNAL_SERVER_ERROR})


@dataclass(frozen=True)
class RetryPolicy:
    """At most `max_attempts` sends of one request; exponential backoff between them."""
    max_attempts: int = 3
    initial_backoff: float = 0.05
    max_backoff: float = 1.0
    codes: frozenset[int] = RETRYABLE_CODES

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, not {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff:
            raise ValueError("backoffs must satisfy 0 <= initial_backoff <= max_backoff")

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before attempt `attempt + 1` (attempt counts from 1)."""
        return min(self.max_backoff, self.initial_backoff * (2 ** (attempt - 1)))

    def should_retry(self, response: s.SendMessageResponse, attempt: int) -> bool:
        return (attempt < self.max_attempts and response.status.code in self.codes
                and not response.entries)


NO_RETRY = RetryPolicy(max_attempts=1)


def receipts(response: s.SendMessageResponse, count: int) -> list[SendReceipt]:
    """The receipts of a SendMessageResponse for `count` messages, or the typed error."""
    status = response.status
    if status.code != d.OK or any(e.status.code != d.OK for e in response.entries):
        code = status.code
        if code == d.OK:  # a per-entry failure under an OK status (not sent by our nodes)
            code = next(e.status.code for e in response.entries if e.status.code != d.OK)
        if response.entries:
            raise NotDurableError(code, status.message, receipts_of(response.entries))
        raise ClientError.from_status(d.Status(code=code, message=status.message), "send")
    if len(response.entries) != count:
        raise ClientError(d.INTERNAL_ERROR, f"send: {len(response.entries)} entries answered "
                                            f"for {count} messages")
    return receipts_of(response.entries)


def batch_request(msgs: Sequence[Message], namespace: str = "") -> s.SendMessageRequest:
    """One SendMessageRequest; ValueError when the messages are not all for one topic."""
    if not msgs:
        raise ValueError("no message to send")
    topic = msgs[0].topic
    if any(m.topic != topic for m in msgs):
        raise ValueError("a batch goes to one topic")
    now = int(time.time() * 1000)
    request = s.SendMessageRequest()
    add = request.messages.add
    for m in msgs:
        to_v2(m, namespace, now, add())
    return request


class Producer:
    """Synchronous sends. `topics` are routed at start (a master auto-creates them)."""

    def __init__(self, connection: Connection, topics: Sequence[str] = (),
                 retry: RetryPolicy = RetryPolicy()) -> None:
        self.connection = connection
        self.retry = retry
        for topic in topics:
            connection.route(topic)

    def send(self, msg: Message, timeout: float | None = None) -> SendReceipt:
        return self.send_batch([msg], timeout)[0]

    def send_batch(self, msgs: Sequence[Message], timeout: float | None = None) -> list[SendReceipt]:
        """One SendMessage for every message (one topic): stored together or not at all."""
        request = batch_request(msgs, self.connection.config.namespace)
        return receipts(self.send_request(request, timeout), len(msgs))

    def send_request(self, request: s.SendMessageRequest,
                     timeout: float | None = None) -> s.SendMessageResponse:
        """A prepared request, with the retry policy; the last response (status unchecked)."""
        attempt = 1
        while True:
            response = self.connection.call("SendMessage", request, timeout)
            if not self.retry.should_retry(response, attempt):
                return response
            time.sleep(self.retry.backoff(attempt))
            attempt += 1

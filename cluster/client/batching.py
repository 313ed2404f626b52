"""BatchingProducer: many threads call `submit(msg)` (a Future); one sender thread coalesces their
messages into SendMessage requests, so the node appends (and replicates, and waits for) many
messages at once. Per-record unary calls cap at ~1-3k/s on a 2-core machine; batches do not.

- A request holds messages of one topic (and, for FIFO messages, of one message_group: the
  server maps a group to its queue only when every message of the request has that group).
- It leaves when it reaches `max_messages` or `max_bytes` (serialized messages; keep it under
  the nodes' maxMessageSize, which bounds the bodies of one request), or when its oldest
  message has waited `linger_ms`; at most `max_in_flight` requests are in flight, and while all
  are, messages keep accumulating (batches grow with the load).
- `submit` blocks while `max_buffered` messages wait (back pressure).
- Messages are serialized once, in the calling thread; a request is their concatenation
  (protobuf encodes a repeated field as consecutive tagged values), sent without re-encoding.
- Retries follow `RetryPolicy` (producer.py: only answers that stored nothing). A batch refused
  for one bad message (a per-message validation code, nothing stored) is split and every
  message resent alone, so only the bad one fails.
- FIFO groups keep their order: one request per (topic, group) in flight, retries first.

Each future resolves to a SendReceipt, or fails with ClientError / NotDurableError (stored,
carrying its receipt) / TransportError (outcome unknown). Futures are resolved on a gRPC
thread: callbacks added to them should be short.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

import grpc

from common.varint import encode_varint
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from cluster.client.connection import Connection
from cluster.client.client_errors import ClientError, NotDurableError, TransportError
from cluster.client.message import Message, SendReceipt, to_v2
from cluster.client.producer import RetryPolicy, receipts

# Refusals that blame one message of a batch: resend its messages one by one.
SPLIT_CODES = frozenset({
    d.BAD_REQUEST, d.ILLEGAL_MESSAGE_TAG, d.ILLEGAL_MESSAGE_KEY, d.ILLEGAL_MESSAGE_GROUP,
    d.ILLEGAL_MESSAGE_PROPERTY_KEY, d.ILLEGAL_MESSAGE_ID, d.ILLEGAL_DELIVERY_TIME,
    d.MESSAGE_BODY_TOO_LARGE, d.MESSAGE_BODY_EMPTY, d.MESSAGE_PROPERTIES_TOO_LARGE,
    d.MESSAGE_CORRUPTED, d.PAYLOAD_TOO_LARGE, d.NOT_IMPLEMENTED})


@dataclass(frozen=True)
class BatchingConfig:
    """A BatchingProducer's limits: when a request leaves (messages, bytes, linger), how many
    are in flight, how many messages may wait (back pressure), and the per-request timeout."""

    max_messages: int = 256
    max_bytes: int = 1024 * 1024
    linger_ms: float = 1.0
    max_in_flight: int = 4
    max_buffered: int = 16384
    timeout: float | None = None  # per request; None: the connection's request_timeout

    def __post_init__(self) -> None:
        if self.max_messages < 1 or self.max_bytes < 1 or self.max_in_flight < 1:
            raise ValueError("max_messages, max_bytes and max_in_flight must be >= 1")
        if self.linger_ms < 0:
            raise ValueError(f"linger_ms must be >= 0, not {self.linger_ms}")
        if self.max_buffered < self.max_messages:
            raise ValueError("max_buffered must be >= max_messages")


def _frame(payload: bytes) -> bytes:
    """One `repeated Message messages = 1` element: tag 0x0A, varint length, bytes."""
    return b"\x0a" + encode_varint(len(payload)) + payload


@dataclass
class _Item:
    framed: bytes
    future: Future
    enqueued: float


@dataclass
class _Batch:
    key: tuple[str, str | None]
    items: list[_Item]
    attempt: int = 1
    not_before: float = 0.0
    payload: bytes = field(default=b"", repr=False)


class BatchingProducer:
    """Coalesces many threads' `submit` calls into SendMessage requests (the module
    docstring): owns the per-(topic, message group) buffers, the retry queue, the FIFO keys
    in flight, the in-flight count and the sender thread.

    `_cond` (a Condition) guards the buffers, the retry queue, `_busy`, `_buffered`,
    `_in_flight` and `_closing`; callers wait on it for buffer room, the sender thread for a
    batch, `flush` for the answers. Futures are resolved outside it, on gRPC threads. The
    counters `requests` (sender thread) and `retried` (gRPC threads) are unlocked statistics."""

    def __init__(self, connection: Connection, config: BatchingConfig = BatchingConfig(),
                 retry: RetryPolicy = RetryPolicy()) -> None:
        self.connection = connection
        self.config = config
        self.retry = retry
        self._cond = threading.Condition()
        self._buffers: dict[tuple[str, str | None], deque[_Item]] = {}
        self._buffer_bytes: dict[tuple[str, str | None], int] = {}
        self._retries: deque[_Batch] = deque()
        self._busy: set[tuple[str, str | None]] = set()  # FIFO keys with a request in flight
        self._buffered = 0
        self._in_flight = 0
        self._closing = False
        self.requests = 0  # SendMessage calls made (retries included)
        self.retried = 0
        self._thread = threading.Thread(target=self._run, name="batching-producer", daemon=True)
        self._thread.start()

    # -- callers ------------------------------------------------------------------------------
    def submit(self, msg: Message) -> Future:
        """A future of the message's SendReceipt. Blocks while max_buffered messages wait."""
        framed = _frame(to_v2(msg, self.connection.config.namespace).SerializeToString())
        future: Future = Future()
        future.set_running_or_notify_cancel()  # not cancellable: it may be on the wire
        key = (msg.topic, msg.message_group or None)
        with self._cond:
            while self._buffered >= self.config.max_buffered and not self._closing:
                self._cond.wait()
            if self._closing:
                raise RuntimeError("the producer is closed")
            buf = self._buffers.get(key)
            if buf is None:
                buf = self._buffers[key] = deque()
                self._buffer_bytes[key] = 0
            buf.append(_Item(framed, future, time.monotonic()))
            self._buffer_bytes[key] += len(framed)
            self._buffered += 1
            if len(buf) == 1 or len(buf) >= self.config.max_messages:
                self._cond.notify_all()
        return future

    def send(self, msg: Message, timeout: float | None = None) -> SendReceipt:
        return self.submit(msg).result(timeout)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every message given so far is answered; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._cond.notify_all()
            while self._buffered or self._retries or self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is None else min(left, 0.05))
        return True

    def close(self, timeout: float | None = 30.0) -> None:
        """Send what is buffered (without lingering), wait for the answers, stop."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        self.flush(timeout)

    def __enter__(self) -> "BatchingProducer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- sender thread ------------------------------------------------------------------------
    def _run(self) -> None:
        cfg = self.config
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    batch, wait = (None, None) if self._in_flight >= cfg.max_in_flight \
                        else self._next_batch(now)
                    if batch is not None:
                        break
                    if self._closing and not (self._buffered or self._retries or self._in_flight):
                        return  # (an answer in flight may still queue a retry)
                    self._cond.wait(wait)
                self._in_flight += 1
                if batch.key[1] is not None:
                    self._busy.add(batch.key)
                self._cond.notify_all()  # senders blocked on max_buffered
            self._submit(batch)

    def _next_batch(self, now: float) -> tuple[_Batch | None, float | None]:
        """The next request to send (lock held), else how long to wait for one."""
        wait: float | None = None
        retry_keys = set()
        for i, batch in enumerate(self._retries):
            if batch.key in self._busy or batch.key in retry_keys:
                retry_keys.add(batch.key)
                continue
            if batch.not_before <= now:
                del self._retries[i]
                return batch, None
            retry_keys.add(batch.key)
            wait = batch.not_before - now if wait is None else min(wait, batch.not_before - now)
        cfg = self.config
        linger = 0.0 if self._closing else cfg.linger_ms / 1000.0
        for key, buf in self._buffers.items():
            if key in self._busy or key in retry_keys:
                continue
            full = len(buf) >= cfg.max_messages or self._buffer_bytes[key] >= cfg.max_bytes
            due = buf[0].enqueued + linger
            if full or due <= now:
                return self._take(key, buf), None
            wait = due - now if wait is None else min(wait, due - now)
        return None, wait

    def _take(self, key: tuple[str, str | None], buf: deque[_Item]) -> _Batch:
        cfg = self.config
        items: list[_Item] = []
        size = 0
        while buf and len(items) < cfg.max_messages:
            n = len(buf[0].framed)
            if items and size + n > cfg.max_bytes:
                break
            items.append(buf.popleft())
            size += n
        self._buffered -= len(items)
        if buf:
            self._buffer_bytes[key] -= size
        else:  # re-inserted at the end next time: topics take turns
            del self._buffers[key]
            del self._buffer_bytes[key]
        return _Batch(key, items, payload=b"".join(i.framed for i in items))

    def _submit(self, batch: _Batch) -> None:
        self.requests += 1
        try:
            call = self.connection.raw_future("SendMessage", batch.payload, s.SendMessageResponse,
                                              self.config.timeout)
        except Exception as e:  # e.g. the channel was closed
            self._finish(batch, error=TransportError(f"SendMessage not sent: {e}", None))
            return
        call.add_done_callback(lambda f: self._done(batch, f))

    def _done(self, batch: _Batch, call: grpc.Future) -> None:
        """Runs on a gRPC thread: resolve the futures, or queue a retry / a split."""
        try:
            response = call.result()
        except grpc.RpcError as e:
            self._finish(batch, error=TransportError.from_rpc_error(
                e, "SendMessage", self.connection.config.target))
            return
        except Exception as e:  # cancelled at close
            self._finish(batch, error=TransportError(f"SendMessage: {e!r}", None))
            return
        if self.retry.should_retry(response, batch.attempt):
            self.retried += 1
            again = _Batch(batch.key, batch.items, batch.attempt + 1,
                           time.monotonic() + self.retry.backoff(batch.attempt), batch.payload)
            self._finish(batch, again=[again])
        elif (len(batch.items) > 1 and not response.entries
              and response.status.code in SPLIT_CODES):
            self._finish(batch, again=[_Batch(batch.key, [item], batch.attempt,
                                              payload=item.framed) for item in batch.items])
        else:
            self._finish(batch, response=response)

    def _finish(self, batch: _Batch, response: s.SendMessageResponse | None = None,
                error: ClientError | None = None, again: list[_Batch] | None = None) -> None:
        with self._cond:
            self._in_flight -= 1
            self._busy.discard(batch.key)
            if again:
                if batch.key[1] is not None:  # FIFO: ahead of everything else of its key
                    self._retries.extendleft(reversed(again))
                else:
                    self._retries.extend(again)
            self._cond.notify_all()
        if again:
            return
        items = batch.items
        if response is not None:
            try:
                for item, receipt in zip(items, receipts(response, len(items))):
                    item.future.set_result(receipt)
                return
            except NotDurableError as e:
                for item, receipt in zip(items, e.receipts):
                    item.future.set_exception(NotDurableError(e.code, e.message, [receipt]))
                items = items[len(e.receipts):]  # (only if the server answered fewer entries)
                error = e
            except ClientError as e:
                error = e
        for item in items:
            item.future.set_exception(error)

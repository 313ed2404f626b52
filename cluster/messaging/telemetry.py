"""Telemetry (bidi stream): every client opens one per endpoint and sends its Settings; the server
answers each Settings with Settings and status OK, and may push commands at any time (the
master's RecoverOrphanedTransactionCommand, see transaction_check.py).

The answer echoes what the client sent (client type, access point, request timeout, user agent,
metric, backoff policy, and its publishing or subscription) with the server's values filled in:
- publishing.max_body_size = the store's maxMessageSize. A reply without it makes the official
  producers set their limit to 0 and refuse every send.
- subscription: receive_batch_size 32, long_polling_timeout 20 s and fifo false when the client
  left them unset (RocketMQ 5's proxy defaults).

The node's gRPC server runs handlers on a bounded thread pool, and an open stream holds one of its
threads (plus a reader thread outside the pool). `StreamBudget` caps the streams kept open and
the long polls together (MAX_OPEN_STREAMS = 40 of 96 workers, leaving 56 for unary calls; a
producer whose stream is refused gets no transaction check-backs until it reopens one): past the
cap a stream
still gets its Settings answer, then is ended; the official clients only need that answer and
reopen the stream at their next settings sync (every 5 minutes).

Pushing commands (check-back of orphaned transactions): a stream kept open is a `ClientStream`
in the `TelemetryHub`'s registry, with the client's id and last Settings (publishing topics or
subscription). Its handler yields from the stream's outbox, which receives both the replies to
the client's commands (read by a separate reader thread, since the handler must be free to yield
pushed commands while the client sends nothing) and commands pushed by the server
(`ClientStream.push`, thread-safe, bounded). The stream leaves the registry when the client
closes it, the call ends, or the service closes.
"""
from __future__ import annotations

import itertools
import logging
import queue
import threading
from typing import Callable, Iterable, Iterator

from google.protobuf.duration_pb2 import Duration

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

log = logging.getLogger(__name__)

MAX_OPEN_STREAMS = 40  # of the node's 96 pool threads (cluster/serving/grpc_server.py)
# ReceiveMessage long polls waiting on the event loop: no thread each, a few KiB; the cap only
# bounds memory (10,000 waiting calls stay well under the node's 256 MiB)
MAX_ASYNC_LONG_POLLS = 10_000
OUTBOX_LIMIT = 1024  # pushed commands waiting for one client; more are refused
POLL_SECONDS = 1.0  # how often an idle handler checks that its call is still alive
DEFAULT_RECEIVE_BATCH_SIZE = 32
DEFAULT_LONG_POLLING_SECONDS = 20


GroupSettings = Callable[[str], "tuple[bool, int] | None"]  # group -> (fifo, max attempts)


def settings_reply(client: d.Settings, max_body_size: int,
                   group_settings: GroupSettings | None = None) -> s.TelemetryCommand:
    reply = d.Settings()
    reply.CopyFrom(client)
    which = client.WhichOneof("pub_sub")
    if which == "publishing":
        reply.publishing.max_body_size = max_body_size
    elif which == "subscription":
        sub = reply.subscription
        if not sub.HasField("receive_batch_size"):
            sub.receive_batch_size = DEFAULT_RECEIVE_BATCH_SIZE
        if not sub.HasField("long_polling_timeout"):
            sub.long_polling_timeout.CopyFrom(Duration(seconds=DEFAULT_LONG_POLLING_SECONDS))
        known = group_settings(sub.group.name) if group_settings is not None else None
        if known is not None:  # the group's config decides (push consumers follow it)
            sub.fifo, reply.backoff_policy.max_attempts = known
        elif not sub.HasField("fifo"):
            sub.fifo = False
    return s.TelemetryCommand(status=d.Status(code=d.OK, message="OK"), settings=reply)


def replies(commands, max_body_size: int, group_settings: GroupSettings | None = None):
    """The server's answers to a stream of client commands (Settings -> Settings; the rest,
    thread stack traces and verify results, need no answer)."""
    for command in commands:
        if command.WhichOneof("command") == "settings":
            yield settings_reply(command.settings, max_body_size, group_settings)


class StreamBudget:
    """How many long-lived handlers (open Telemetry streams, long polls) may hold a thread."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open = 0
        self._lock = threading.Lock()

    def try_acquire(self) -> bool:
        with self._lock:
            if self._open >= self.limit:
                return False
            self._open += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._open -= 1

    @property
    def open(self) -> int:
        return self._open


_END = object()


class ClientStream:
    """One open Telemetry stream: who the client is, its last Settings, and the outbox of
    commands to send it. push() and close() are safe from any thread."""

    _ids = itertools.count(1)

    def __init__(self, client_id: str = "", peer: str = "", relayed: bool = False) -> None:
        self.client_id = client_id or f"anonymous-{next(self._ids)}"
        self.peer = peer
        self.relayed = relayed  # opened by a slave on its client's behalf (telemetry_relay.py)
        self.settings: d.Settings | None = None
        self._outbox: queue.Queue = queue.Queue()
        self._pushed = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def publishing_topics(self) -> frozenset[str]:
        settings = self.settings
        if settings is None or settings.WhichOneof("pub_sub") != "publishing":
            return frozenset()
        return frozenset(t.name for t in settings.publishing.topics)

    def publishes(self, topic: str) -> bool:
        return topic in self.publishing_topics

    def push(self, command: s.TelemetryCommand) -> bool:
        """Queue a server command; False when the stream is closed or its outbox is full."""
        with self._lock:
            if self._closed.is_set() or self._pushed >= OUTBOX_LIMIT:
                return False
            self._pushed += 1
            self._outbox.put(command)
            return True

    def reply(self, command: s.TelemetryCommand) -> None:
        """Queue the answer to one of the client's commands (not counted against the limit)."""
        if not self._closed.is_set():
            self._outbox.put(command)

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._outbox.put(_END)

    def next(self, timeout: float):
        """The next command to send, None after `timeout` without one, _END once closed."""
        try:
            item = self._outbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is not _END and item.WhichOneof("command") != "settings":
            with self._lock:
                self._pushed -= 1
        return item


class TelemetryHub:
    """The registry of open Telemetry streams, and the handler body that serves one."""

    def __init__(self, budget: StreamBudget, max_body_size: Callable[[], int]) -> None:
        self.budget = budget
        self.max_body_size = max_body_size
        self._streams: list[ClientStream] = []
        self._lock = threading.Lock()
        self._closed = False
        self._next = itertools.count()
        # A consumer group's (fifo, max delivery attempts), when this node knows the group.
        self.group_settings: GroupSettings | None = None
        # Called with a stream whenever its Settings change (e.g. a slave relays producers).
        self.listeners: list[Callable[[ClientStream], None]] = []

    # -- registry -----------------------------------------------------------------------------
    def streams(self) -> list[ClientStream]:
        with self._lock:
            return [st for st in self._streams if not st.closed]

    def by_client(self, client_id: str) -> list[ClientStream]:
        return [st for st in self.streams() if st.client_id == client_id]

    def producers_of(self, topic: str) -> list[ClientStream]:
        """Open streams of producers that publish `topic`, rotated on every call so checks
        spread over the producers of a topic."""
        found = [st for st in self.streams() if st.publishes(topic)]
        if len(found) > 1:
            k = next(self._next) % len(found)
            found = found[k:] + found[:k]
        return found

    def _register(self, stream: ClientStream) -> bool:
        with self._lock:
            if self._closed:
                return False
            if stream not in self._streams:
                self._streams.append(stream)
            return True

    def _unregister(self, stream: ClientStream) -> None:
        with self._lock:
            if stream in self._streams:
                self._streams.remove(stream)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            streams, self._streams = self._streams, []
        for st in streams:
            st.close()

    # -- serving one stream -------------------------------------------------------------------
    def serve(self, commands: Iterable[s.TelemetryCommand], *, client_id: str = "", peer: str = "",
              relayed: bool = False,
              is_active: Callable[[], bool] = lambda: True) -> Iterator[s.TelemetryCommand]:
        """The server's side of one Telemetry call."""
        if not self.budget.try_acquire():
            for reply in replies(commands, self.max_body_size(), self.group_settings):
                yield reply
                return  # answered; keeping the stream would hold a thread (see the module doc)
            return
        stream = ClientStream(client_id, peer, relayed)
        try:
            if not self._register(stream):
                return
            reader = threading.Thread(target=self._read, args=(commands, stream), daemon=True,
                                      name=f"telemetry-{stream.client_id}")
            reader.start()
            while True:
                item = stream.next(POLL_SECONDS)
                if item is _END:
                    break
                if item is None:
                    if not is_active():
                        break
                    continue
                yield item
        finally:
            stream.close()
            self._unregister(stream)
            self.budget.release()

    def _read(self, commands: Iterable[s.TelemetryCommand], stream: ClientStream) -> None:
        try:
            for command in commands:
                if stream.closed:
                    break
                if command.WhichOneof("command") == "settings":
                    stream.settings = command.settings
                    stream.reply(settings_reply(command.settings, self.max_body_size(),
                                                self.group_settings))
                    for listener in list(self.listeners):
                        try:
                            listener(stream)
                        except Exception:  # a listener must not end the client's stream
                            log.exception("telemetry listener failed")
        except Exception as e:  # the call ended (cancelled, connection lost)
            log.debug("telemetry stream of %s ended: %s", stream.client_id, e)
        finally:
            stream.close()

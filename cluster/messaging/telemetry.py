"""Telemetry (bidi stream): every client opens one per endpoint and sends its Settings; the server
answers each Settings with Settings and status OK, and may later push commands (none yet).

The answer echoes what the client sent (client type, access point, request timeout, user agent,
metric, backoff policy, and its publishing or subscription) with the server's values filled in:
- publishing.max_body_size = the store's maxMessageSize. A reply without it makes the official
  producers set their limit to 0 and refuse every send.
- subscription: receive_batch_size 32, long_polling_timeout 20 s and fifo false when the client
  left them unset (RocketMQ 5's proxy defaults).

The node's gRPC server runs handlers on a bounded thread pool, and an open stream holds one of its
threads. `StreamBudget` caps the streams kept open (MAX_OPEN_STREAMS): past the cap a stream
still gets its Settings answer, then is ended; the official clients only need that answer and
reopen the stream at their next settings sync (every 5 minutes).
"""
from __future__ import annotations

import threading

from google.protobuf.duration_pb2 import Duration

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

MAX_OPEN_STREAMS = 24  # of the node's 64 gRPC worker threads
DEFAULT_RECEIVE_BATCH_SIZE = 32
DEFAULT_LONG_POLLING_SECONDS = 20


def settings_reply(client: d.Settings, max_body_size: int) -> s.TelemetryCommand:
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
        if not sub.HasField("fifo"):
            sub.fifo = False
    return s.TelemetryCommand(status=d.Status(code=d.OK, message="OK"), settings=reply)


def replies(commands, max_body_size: int):
    """The server's answers to a stream of client commands (Settings -> Settings; the rest,
    thread stack traces and verify results, need no answer)."""
    for command in commands:
        if command.WhichOneof("command") == "settings":
            yield settings_reply(command.settings, max_body_size)


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

"""Producers connected to a slave still get the master's transaction check-backs.

The official clients keep their Telemetry stream on whichever node of the route answers, often
a slave, but only the master checks orphaned transactions (transaction_check.py), and it can
only push to streams open on itself. So, while this node is a slave, every producer stream open
here is mirrored to the master: a relay opens a Telemetry call to the master on the client's
behalf (same client id, signed and marked forwarded like other forwarded calls), sends it the
client's Settings (again whenever they change), and copies every command the master pushes on
it (RecoverOrphanedTransactionCommand) into the client's own stream. The master's Settings
replies are dropped: the slave already answered the client. The producer's EndTransaction comes
back to the slave, which forwards it (transaction.py).

One relay thread per producer stream, started at its first Settings. It idles while this node
is master (the local checker pushes directly), reconnects with backoff when the master cannot be
reached, follows the node's current master after a role switch (a new master is tried at once,
whatever the backoff reached while the old one was gone: check-backs resume within
CHANGE_POLL_SECONDS of the node learning of the election), and ends with the client's stream
or the service.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Callable

import grpc

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from cluster.messaging.telemetry import ClientStream, TelemetryHub

if TYPE_CHECKING:
    from cluster.messaging.send import MasterForwarder

log = logging.getLogger(__name__)
IDLE_SECONDS = 1.0  # how often an idle or waiting relay looks at the node's role again
MAX_BACKOFF_SECONDS = 5.0
CHANGE_POLL_SECONDS = 0.1  # how often a relay backing off looks whether the master changed


class TelemetryRelay:
    """Mirrors this slave's producer streams to the master (the module docstring): owns one
    `_Relay` thread per producer stream, started from the hub's Settings callback, and the
    stop signal they all watch.

    `_lock` guards `_relays` (stream id -> relay), which the streams' reader threads, the
    relays ending and `active`/`close` touch. `_stopping` is an Event, read unlocked."""

    def __init__(self, master_address: Callable[[], str], hub: TelemetryHub,
                 forwarder: "MasterForwarder") -> None:
        """`master_address`: the master this node follows, "" while it is master itself."""
        self.master_address = master_address
        self.forwarder = forwarder
        self._relays: dict[int, _Relay] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        hub.listeners.append(self.on_settings)

    def on_settings(self, stream: ClientStream) -> None:
        """A stream's Settings changed (the hub calls this from the stream's reader thread)."""
        if not stream.publishing_topics or stream.relayed or self._stopping.is_set():
            return  # a relayed stream is relayed by the slave that opened it, not again
        with self._lock:
            relay = self._relays.get(id(stream))
            if relay is None or not relay.is_alive():
                relay = self._relays[id(stream)] = _Relay(self, stream)
                relay.start()
        relay.settings_changed()

    def _done(self, relay: "_Relay") -> None:
        with self._lock:
            if self._relays.get(id(relay.stream)) is relay:
                del self._relays[id(relay.stream)]

    def active(self) -> int:
        """Relays connected to a master right now."""
        with self._lock:
            return sum(1 for r in self._relays.values() if r.connected)

    def close(self) -> None:
        self._stopping.set()
        with self._lock:
            relays = list(self._relays.values())
        for relay in relays:
            relay.wake()
        for relay in relays:
            relay.join(2.0)


class _Relay(threading.Thread):
    """One producer stream's relay thread: follows the node's current master, keeps a
    Telemetry call open to it with the client's Settings, and copies the master's commands
    into the client's stream. Owns the call (its thread's only), `connected` (read by other
    threads, a single attribute) and a queue of Settings changes that wakes the request
    generator; `settings_changed` and `wake` are its only entry points from other threads."""

    def __init__(self, owner: TelemetryRelay, stream: ClientStream) -> None:
        super().__init__(name=f"telemetry-relay-{stream.client_id}", daemon=True)
        self.owner = owner
        self.stream = stream
        self.connected = False
        self._settings: queue.Queue = queue.Queue()
        self._wake = threading.Event()

    def settings_changed(self) -> None:
        self._settings.put(True)
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()
        self._settings.put(False)

    def _over(self) -> bool:
        return self.stream.closed or self.owner._stopping.is_set()

    def run(self) -> None:
        backoff = 0.2
        try:
            while not self._over():
                address = self.owner.master_address()
                if not address:
                    self._wake.wait(IDLE_SECONDS)
                    self._wake.clear()
                    continue
                if self._relay_to(address) or self._pause(address, backoff):
                    backoff = 0.2
                else:
                    backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
        finally:
            self.owner._done(self)

    def _pause(self, address: str, seconds: float) -> bool:
        """Waits `seconds` before trying `address` again; True when it ended early because
        the node follows another master now (or was woken), which is tried at once."""
        end = time.monotonic() + seconds
        while not self._over():
            left = end - time.monotonic()
            if left <= 0:
                return False
            if self.owner.master_address() != address:
                return True
            if self._wake.wait(min(left, CHANGE_POLL_SECONDS)):
                self._wake.clear()
                return True
        return True

    def _relay_to(self, address: str) -> bool:
        """Mirror the stream to `address` until it ends; False when it failed early."""
        holder: dict = {}
        forwarder = self.owner.forwarder

        def requests():
            yield s.TelemetryCommand(settings=self.stream.settings)
            while True:
                try:
                    changed = self._settings.get(timeout=IDLE_SECONDS)
                except queue.Empty:
                    changed = False
                if self._over() or self.owner.master_address() != address:
                    call = holder.get("call")
                    if call is not None:
                        call.cancel()
                    return
                if changed and self.stream.settings is not None:
                    yield s.TelemetryCommand(settings=self.stream.settings)

        got_any = False
        try:
            call = forwarder.stub(address).Telemetry(
                requests(), metadata=forwarder.metadata(self.stream.client_id))
            holder["call"] = call
            for command in call:
                if command.HasField("status") and \
                        command.status.code in (d.UNAUTHORIZED, d.FORBIDDEN):
                    # The master's ACL refused the relay (signed with the node's accessKey/
                    # secretKey: with ACL on, every node of the group needs the same pair).
                    # Back off like an unreachable master instead of reconnecting at once.
                    log.warning("relay of %s refused by the master %s: %s", self.stream.client_id,
                                address, command.status.message)
                    return False
                got_any = True
                self.connected = True
                if command.WhichOneof("command") == "settings":
                    continue  # the client has its answer from this node already
                if not self.stream.push(command):
                    log.warning("relay of %s: the client's stream refused a command",
                                self.stream.client_id)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            if code is not grpc.StatusCode.CANCELLED:
                log.info("relay of %s to %s ended: %s", self.stream.client_id, address,
                         code.name if code else e)
        finally:
            self.connected = False
        return got_any

"""gRPC adapter of the slave side: connects to the master, drives a `ha.slave_session.SlaveSession`
and carries out its actions on the store, reconnecting with backoff; slave/wire.py maps the
session's events to and from protobuf.

Per session: this thread reads the master's messages and applies them in order (truncate,
record epoch, append verbatim, confirm, ack); gRPC pulls the slave's messages from
`_requests()`, which also sends an Ack every haSendHeartbeatInterval and cancels the call when
the master has been silent for haHousekeepingInterval.

Order on truncation (crash-safe): the epoch file first, then the commitlog. A crash in between
leaves extra bytes attributed to the previous epoch, and the next handshake cuts them again;
the other order could leave an epoch entry that starts beyond the data.

Catch-up first: while the slave is more than haMaxInFlightBytes behind the master, reput
(consume queues, index) waits, so the copy of the log, which failover depends on, is not
slowed down by dispatch competing for the GIL; dispatch then catches up at reput speed.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Callable, Iterator, Sequence

import grpc

from ha.epoch import EpochCache
from ha.messages import Ack, MalformedMessage, MasterMessage, Nack, SlaveMessage, Welcome
from ha.slave_session import (Append, Disconnect, RecordEpoch, SendAck, SendNack, SetConfirm,
                              SlaveAction, SlaveSession, Truncate)
from proto import replication_pb2 as pb
from store.clock import Clock
from store.config import StoreConfig
from store.epoch_file import EpochFile
from store.failpoints import failpoint
from store.message_store import MessageStore
from store.put_result import PutStatus

from slave import slave_wire as wire

log = logging.getLogger(__name__)
STREAM_METHOD = "/rmqstore.replication.v1.Replication/Stream"
GRPC_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024),
                ("grpc.max_send_message_length", 64 * 1024 * 1024)]


class ReplicationClient:
    """A slave node's replication from its master: connect, follow, reconnect with backoff.

    Owns: the replication thread, one `SlaveSession` and one gRPC call at a time, the outbox of
    messages to the master, and `confirm` (how far the master said the log is confirmed; with
    the catch-up rule it bounds the store's reput through `confirm_source`). Carries out the
    session's actions on what it shares with the node: it appends to and truncates the store
    and records and truncates the node's epochs (`EpochCache` and its file).

    Threads and locks: no lock of its own. The replication thread (`_run`) decodes every
    message and applies every action in order, so the store's appends and truncations and the
    epoch file's saves come from one thread and never race. The other threads touch only
    thread-safe objects or single attributes (atomic under the GIL): gRPC's request thread runs
    `_requests` (takes from the outbox, a queue; sends the periodic Ack at the session's end;
    when the master is silent, sets `last_error` and cancels the call), the store's reput
    thread calls `_dispatch_bound`, and `stop` (the node's role switch) sets an Event, cancels
    the call and joins the replication thread.
    """

    def __init__(self, store: MessageStore, epochs: EpochCache, epoch_file: EpochFile,
                 master_address: str, node_id: str, broker_name: str, clock: Clock,
                 credentials: Callable[[grpc.Channel], Sequence[tuple[str, str]]],
                 open_channel: Callable[[str], grpc.Channel] | None = None) -> None:
        self.store = store
        self.epochs = epochs
        self.epoch_file = epoch_file
        self.master_address = master_address
        self.node_id = node_id
        self.broker_name = broker_name
        self.clock = clock
        self.credentials = credentials  # the metadata proving membership for one stream
        self.confirm = min(store.checkpoint.confirm_phy_offset, store.max_phy_offset())
        self.connected = False
        self.last_error = ""
        self.sessions = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._call = None
        self._outbox: queue.Queue[SlaveMessage | None] = queue.Queue()
        self._last_received = 0.0
        self._session: SlaveSession | None = None
        # how a channel to the master is opened: the node passes its TLS rule in
        # (cluster/security/tls.py open_channel); plaintext without one
        self._open_channel = open_channel or (
            lambda address: grpc.insecure_channel(address, options=GRPC_OPTIONS))

    @property
    def config(self) -> StoreConfig:
        """The store's config as it is now."""
        return self.store.config

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self.store.confirm_source = self._dispatch_bound
        self._thread = threading.Thread(target=self._run, name="replication-client", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        call = self._call
        if call is not None:
            call.cancel()
        self._outbox.put(None)
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def _dispatch_bound(self) -> int:
        session = self._session
        if session is not None and (session.master_max_offset - session.expected_offset
                                    > self.config.ha_max_in_flight_bytes):
            return min(self.confirm, self.store.reput.reput_from_offset)  # catching up
        return self.confirm

    def _run(self) -> None:
        c = self.config
        backoff = c.ha_reconnect_min_backoff
        while not self._stopping.is_set():
            handshook = False
            try:
                handshook = self._session_once()
            except grpc.RpcError as e:
                detail = e.details() if hasattr(e, "details") else str(e)
                code = e.code().name if hasattr(e, "code") and e.code() else "?"
                self.last_error = f"{code}: {detail}"
            except Exception as e:  # keep replicating after a bug, but say what happened
                log.exception("replication session failed")
                self.last_error = f"slave error: {e}"
            self.connected = False
            if self._stopping.is_set():
                return
            if handshook:
                backoff = c.ha_reconnect_min_backoff
            log.warning("replication from %s ended (%s); reconnecting in %d ms",
                        self.master_address, self.last_error, backoff)
            self._stopping.wait(backoff / 1000.0)
            backoff = min(backoff * 2, c.ha_reconnect_max_backoff)

    # -- one session -------------------------------------------------------------------------
    def _session_once(self) -> bool:
        store = self.store
        session = SlaveSession(self.node_id, self.broker_name, epochs=self.epochs,
                               min_offset=store.min_phy_offset(), max_offset=store.max_phy_offset(),
                               file_size=self.config.mapped_file_size_commit_log,
                               sync_from_last_file=self.config.sync_from_last_file)
        self._outbox = queue.Queue()
        self._outbox.put(session.start())
        handshook = False
        with self._open_channel(self.master_address) as channel:
            try:
                metadata = self.credentials(channel)
            except PermissionError as e:  # the master is not a member, or we have no secret
                self.last_error = f"membership: {e}"
                return False
            self._session = session  # from here on the stream runs (the catch-up bound)
            self._last_received = self.clock.monotonic()
            stream = channel.stream_stream(STREAM_METHOD,
                                           request_serializer=pb.SlaveMessage.SerializeToString,
                                           response_deserializer=wire.decode_master)
            call = stream(self._requests(session), metadata=metadata)
            self._call = call
            if self._stopping.is_set():
                call.cancel()
            try:
                for msg in call:
                    self._last_received = self.clock.monotonic()
                    try:
                        event: MasterMessage | None = wire.from_master(msg)
                    except MalformedMessage as e:
                        event, actions = None, session.close(str(e))
                    else:
                        actions = session.on_message(event)
                    for action in actions:
                        if not self._apply(action, session):
                            self.last_error = session.close_reason
                            call.cancel()
                            return handshook
                    if not handshook and isinstance(event, Welcome):
                        handshook = True
                        self.connected = True
                        self.sessions += 1
                        self.last_error = ""
                        log.info("following %s from offset %d", self.master_address,
                                 session.expected_offset)
            finally:
                self._session = None
                self._call = None
                self._outbox.put(None)
        self.last_error = self.last_error or "the master ended the stream"
        return handshook

    def _requests(self, session: SlaveSession) -> Iterator[pb.SlaveMessage]:
        c = self.config
        outbox = self._outbox
        interval = c.ha_send_heartbeat_interval / 1000.0
        while True:
            try:
                msg = outbox.get(timeout=min(interval, 1.0))
            except queue.Empty:
                if self.clock.monotonic() - self._last_received > c.ha_housekeeping_interval / 1000.0:
                    self.last_error = (f"nothing from the master for {c.ha_housekeeping_interval} ms")
                    call = self._call
                    if call is not None:
                        call.cancel()
                    return
                if session.state.value in ("following", "resending"):
                    msg = self._ack(session.expected_offset)
                else:
                    continue
            if msg is None:
                return
            yield wire.to_master(msg)

    def _ack(self, offset: int) -> Ack:
        return Ack(max_offset=offset, flushed_offset=self.store.flushed_offset)

    def _apply(self, action: SlaveAction, session: SlaveSession) -> bool:
        store = self.store
        if isinstance(action, Append):
            store.append_raw(action.offset, action.data)
        elif isinstance(action, SendAck):
            if self.config.is_sync_flush and action.offset > store.flushed_offset:
                # A SYNC_FLUSH slave acks only what is on its disk, so a sync master's
                # acknowledgement means "on the slaves' disks", not just in their memory.
                status = store.wait_flushed(action.offset)
                if status is not PutStatus.PUT_OK:
                    session.close_reason = f"flush failed on this slave: {status}"
                    return False
            self._outbox.put(self._ack(action.offset))
        elif isinstance(action, SetConfirm):
            if action.offset != self.confirm:
                self.confirm = action.offset
                store.reput.wakeup()
        elif isinstance(action, RecordEpoch):
            self.epochs.append(action.epoch, action.start_offset)
            self.epoch_file.save(self.epochs)
        elif isinstance(action, Truncate):
            log.warning("diverged from the master: truncating %d -> %d", store.max_phy_offset(),
                        action.offset)
            if self.epochs.truncate_from(action.offset):
                self.epoch_file.save(self.epochs)
            self.confirm = min(self.confirm, action.offset)
            if action.offset < store.max_phy_offset():
                store.truncate(action.offset)
            failpoint("slave.after_truncate")
        elif isinstance(action, SendNack):
            log.warning("re-requesting from %d: %s", action.offset, action.reason)
            self._outbox.put(Nack(offset=action.offset, reason=action.reason))
        elif isinstance(action, Disconnect):
            log.warning("leaving the master: %s", action.reason)
            return False
        return True

"""gRPC adapter of the slave side: connects to the master, drives a `ha.slave_session.SlaveSession`
and carries out its actions on the store, reconnecting with backoff; slave/slave_wire.py maps
the session's events to and from protobuf.

The stream runs on the node's event loop (the one its grpc.aio server runs on), as the
master's side does (master/replication_servicer.py): a chunk is read, handed to the session,
applied and acknowledged there, with no thread between the socket and the ack. A sync stub
instead passes each chunk through gRPC's channel thread to a reader thread and each ack
through a queue to gRPC's request thread; the bare round trip of a 1.1 KiB ping-pong
between two processes (`tests/perf/bare_stream_rtt.py`) has p99 1.1-1.4 ms that way against
0.5 ms on a loop. The acks are written by a writer task, in order, so the next chunk is read
while gRPC completes the write of the last ack (one write at a time per call). Only the wait
for the flush that a SYNC_FLUSH slave's ack waits for runs in the pool, still in order; a
chunk of catch-up (up to haTransferBatchSize, 1 MiB: its CRC and copy) is applied on the
loop, as a hop to the pool per chunk cost more than it (8 threads of batched sends to a
SYNC_MASTER: 10-15% fewer messages a second with chunks over 64 KiB in the pool). One loop
per process: grpc.aio wakes every loop of the process on each event, so the slave does not
run a loop of its own.

Per session: the session's Ack of every chunk goes out when the chunk is applied (and, on a
SYNC_FLUSH slave, flushed); every haSendHeartbeatInterval without a message to the master
(at most 1 s), the last of those acks is sent again with the current flushed offset, and a
master silent for haHousekeepingInterval ends the call.

Order on truncation (crash-safe): the epoch file first, then the commitlog. A crash in between
leaves extra bytes attributed to the previous epoch, and the next handshake cuts them again;
the other order could leave an epoch entry that starts beyond the data.

Catch-up first: while the slave is more than haMaxInFlightBytes behind the master, reput
(consume queues, index) waits, so the copy of the log, which failover depends on, is not
slowed down by dispatch competing for the GIL; dispatch then catches up at reput speed.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Awaitable, Callable, Sequence

import grpc
import grpc.aio

from ha.epoch import EpochCache
from ha.messages import Ack, Chunk, MalformedMessage, MasterMessage, Nack, SlaveMessage, Welcome
from ha.slave_session import (Append, Disconnect, RecordEpoch, SendAck, SendNack, SetConfirm,
                              SlaveSession, SlaveState, Truncate)
from proto import replication_pb2 as pb
from common.clock import Clock
from store.config import StoreConfig
from store.epoch_file import EpochFile
from common.failpoints import failpoint
from store.message_store import MessageStore
from store.put_result import PutStatus

from slave import slave_wire as wire

log = logging.getLogger(__name__)
STREAM_METHOD = "/rmqstore.replication.v1.Replication/Stream"
GRPC_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024),
                ("grpc.max_send_message_length", 64 * 1024 * 1024)]
STOP_TIMEOUT_S = 10.0


class ReplicationClient:
    """A slave node's replication from its master: connect, follow, reconnect with backoff.

    Owns: the replication task on `loop`, one `SlaveSession` and one gRPC call at a time, and
    `confirm` (how far the master said the log is confirmed; with the catch-up rule it bounds
    the store's reput through `confirm_source`). Carries out the session's actions on what it
    shares with the node: it appends to and truncates the store and records and truncates the
    node's epochs (`EpochCache` and its file).

    Threads and locks: no lock of its own. The task handles one master message at a time,
    awaiting the pool when a message is handled there, so the store's appends and
    truncations and the epoch file's saves never race. The call, the session's state and
    `_acked` are the loop's; other threads read single attributes (atomic under the GIL):
    the store's reput thread calls `_dispatch_bound`, the node's status reads `connected`
    and `last_error`, and `stop` (the node's role switch, from any thread but the loop's)
    sets an Event, has the loop cancel the call and waits for the task to end.
    """

    def __init__(self, store: MessageStore, epochs: EpochCache, epoch_file: EpochFile,
                 master_address: str, node_id: str, broker_name: str, clock: Clock,
                 loop: asyncio.AbstractEventLoop,
                 credentials: Callable[[grpc.aio.Channel], Awaitable[Sequence[tuple[str, str]]]],
                 open_channel: Callable[[str], grpc.aio.Channel] | None = None) -> None:
        self.store = store
        self.epochs = epochs
        self.epoch_file = epoch_file
        self.master_address = master_address
        self.node_id = node_id
        self.broker_name = broker_name
        self.clock = clock
        self.loop = loop
        self.credentials = credentials  # the metadata proving membership for one stream
        self.confirm = min(store.checkpoint_confirm_offset, store.max_phy_offset())
        self.connected = False
        self.last_error = ""
        self.sessions = 0
        self._stopping = threading.Event()
        self._task: concurrent.futures.Future | None = None
        self._wake: asyncio.Event | None = None  # the loop's: cuts a reconnect backoff short
        self._loop_thread: int | None = None
        self._call: grpc.aio.StreamStreamCall | None = None
        self._outbox: asyncio.Queue[SlaveMessage] | None = None  # the writer task's
        self._last_received = 0.0
        self._last_sent = 0.0
        self._acked: int | None = None  # the offset of the last Ack sent in this session
        self._session: SlaveSession | None = None
        # how a channel to the master is opened: the node passes its TLS rule in
        # (cluster/security/tls.py open_channel); plaintext without one
        self._open_channel = open_channel or (
            lambda address: grpc.aio.insecure_channel(address, options=GRPC_OPTIONS))

    @property
    def config(self) -> StoreConfig:
        """The store's config as it is now."""
        return self.store.config

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self.store.confirm_source = self._dispatch_bound
        self._task = asyncio.run_coroutine_threadsafe(self._run(), self.loop)

    def stop(self) -> None:
        """End the replication and wait (up to 10 s) until its task is over; from the loop's
        own thread (which the task needs to end), without waiting."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            self.loop.call_soon_threadsafe(self._interrupt)
        except RuntimeError:  # the loop is closed: the task went with it
            return
        if threading.get_ident() == self._loop_thread:
            return  # the task ends once this callback of the loop returns
        try:
            task.result(STOP_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            log.warning("replication from %s did not stop within %.0f s",
                        self.master_address, STOP_TIMEOUT_S)
        except (concurrent.futures.CancelledError, Exception):  # it is over: all stop needs
            pass

    def _interrupt(self) -> None:
        if self._call is not None:
            self._call.cancel()
        if self._wake is not None:
            self._wake.set()

    def _dispatch_bound(self) -> int:
        session = self._session
        if session is not None and (session.master_max_offset - session.expected_offset
                                    > self.config.ha_max_in_flight_bytes):
            return min(self.confirm, self.store.dispatched_offset)  # catching up
        return self.confirm

    async def _run(self) -> None:
        self._loop_thread = threading.get_ident()
        self._wake = asyncio.Event()
        c = self.config
        backoff = c.ha_reconnect_min_backoff
        while not self._stopping.is_set():
            handshook = False
            try:
                handshook = await self._session_once()
            except grpc.RpcError as e:
                detail = e.details() if hasattr(e, "details") else str(e)
                code = e.code().name if hasattr(e, "code") and e.code() else "?"
                self.last_error = f"{code}: {detail}"
            except (asyncio.CancelledError, asyncio.InvalidStateError):
                # our own call.cancel() (stop, a silent master) under a read or a write
                self.last_error = self.last_error or "the call was cancelled"
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
            try:
                await asyncio.wait_for(self._wake.wait(), backoff / 1000.0)
            except asyncio.TimeoutError:
                pass
            backoff = min(backoff * 2, c.ha_reconnect_max_backoff)

    # -- one session -------------------------------------------------------------------------
    async def _session_once(self) -> bool:
        store = self.store
        session = SlaveSession(self.node_id, self.broker_name, epochs=self.epochs,
                               min_offset=store.min_phy_offset(), max_offset=store.max_phy_offset(),
                               file_size=self.config.mapped_file_size_commit_log,
                               sync_from_last_file=self.config.sync_from_last_file)
        handshook = False
        async with self._open_channel(self.master_address) as channel:
            try:
                metadata = await self.credentials(channel)
            except PermissionError as e:  # the master is not a member, or we have no secret
                self.last_error = f"membership: {e}"
                return False
            self._session = session  # from here on the stream runs (the catch-up bound)
            self._last_received = self.clock.monotonic()
            stream = channel.stream_stream(STREAM_METHOD,
                                           request_serializer=pb.SlaveMessage.SerializeToString,
                                           response_deserializer=wire.decode_master)
            call = stream(metadata=metadata)
            self._call = call
            self._acked = None
            if self._stopping.is_set():
                call.cancel()
            self._outbox = asyncio.Queue()
            writer = asyncio.ensure_future(self._writer(call, self._outbox))
            heartbeats = asyncio.ensure_future(self._heartbeats(call, session))
            try:
                self._send(session.start())
                while True:
                    msg = await call.read()
                    if msg is grpc.aio.EOF:
                        break
                    self._last_received = self.clock.monotonic()
                    if self._waits_for_flush(msg):
                        replies, event = await self.loop.run_in_executor(
                            None, self._handle, session, msg)
                    else:
                        replies, event = self._handle(session, msg)
                    for reply in replies:
                        self._send(reply)
                    if session.state is SlaveState.CLOSED:
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
                heartbeats.cancel()
                writer.cancel()
                self._session = None
                self._call = None
        self.last_error = self.last_error or "the master ended the stream"
        return handshook

    def _waits_for_flush(self, msg: "Chunk | pb.MasterMessage") -> bool:
        """Whether handling `msg` blocks on a flush (a chunk with data on a SYNC_FLUSH slave:
        its ack waits for the flush), which the pool does instead of the loop."""
        return isinstance(msg, Chunk) and bool(msg.data) and self.config.is_sync_flush

    def _send(self, msg: SlaveMessage) -> None:
        """Queue `msg` for the writer task (after everything queued before it)."""
        assert self._outbox is not None
        self._outbox.put_nowait(msg)
        self._last_sent = self.clock.monotonic()
        if isinstance(msg, Ack):
            self._acked = msg.max_offset

    @staticmethod
    async def _writer(call: grpc.aio.StreamStreamCall, outbox: "asyncio.Queue[SlaveMessage]"
                      ) -> None:
        """Writes the session's messages in order, one at a time (gRPC's rule for a call);
        ends when a write fails (the call ended: the read loop sees why)."""
        while True:
            msg = await outbox.get()
            try:
                await call.write(wire.to_master(msg))
            except Exception:  # noqa: BLE001 - any failed write: the call is over
                return

    async def _heartbeats(self, call: grpc.aio.StreamStreamCall, session: SlaveSession) -> None:
        """Resend the last Ack (with the flushed offset as it is now) when nothing went to the
        master for a heartbeat interval; end the call when the master has been silent for
        haHousekeepingInterval. Only what an Ack of the session already said is repeated: the
        session's expected offset runs ahead of the append (and of the flush on a SYNC_FLUSH
        slave) while a chunk is applied, so acking it would acknowledge bytes this slave does
        not hold yet."""
        c = self.config
        interval = min(c.ha_send_heartbeat_interval / 1000.0, 1.0)
        while True:
            await asyncio.sleep(interval)
            now = self.clock.monotonic()
            if now - self._last_received > c.ha_housekeeping_interval / 1000.0:
                self.last_error = f"nothing from the master for {c.ha_housekeeping_interval} ms"
                call.cancel()
                return
            if (self._acked is not None and now - self._last_sent >= interval
                    and session.state in (SlaveState.FOLLOWING, SlaveState.RESENDING)):
                self._send(self._ack(self._acked))

    def _ack(self, offset: int) -> Ack:
        return Ack(max_offset=offset, flushed_offset=self.store.flushed_offset)

    def _handle(self, session: SlaveSession, msg: "Chunk | pb.MasterMessage"
                ) -> tuple[list[SlaveMessage], MasterMessage | None]:
        """Feed one master message to the session and carry out its actions in order (on the
        loop or in the pool, one message at a time). Returns what to send to the master and
        the decoded event; the session is CLOSED when the stream must end."""
        try:
            event: MasterMessage | None = wire.from_master(msg)
        except MalformedMessage as e:
            event, actions = None, session.close(str(e))
        else:
            actions = session.on_message(event)
        replies: list[SlaveMessage] = []
        for action in actions:
            reply = self._apply(action, session)
            if session.state is SlaveState.CLOSED:
                break
            if reply is not None:
                replies.append(reply)
        return replies, event

    def _apply(self, action: object, session: SlaveSession) -> SlaveMessage | None:
        """One action on the store or the epochs; returns the message it sends, if any. A
        failure that ends the stream closes the session (with its reason)."""
        store = self.store
        if isinstance(action, Append):
            store.append_raw(action.offset, action.data)
        elif isinstance(action, SendAck):
            if self.config.is_sync_flush and action.offset > store.flushed_offset:
                # A SYNC_FLUSH slave acks only what is on its disk, so a sync master's
                # acknowledgement means "on the slaves' disks", not just in their memory.
                status = store.wait_flushed(action.offset)
                if status is not PutStatus.PUT_OK:
                    session.close(f"flush failed on this slave: {status}")
                    return None
            return self._ack(action.offset)
        elif isinstance(action, SetConfirm):
            if action.offset != self.confirm:
                self.confirm = action.offset
                store.wake_dispatch()
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
            return Nack(offset=action.offset, reason=action.reason)
        elif isinstance(action, Disconnect):
            log.warning("leaving the master: %s", action.reason)
        return None

"""gRPC adapter of the master side: one `MasterConnection` per slave stream, driving a
`ha.master_session.MasterSession`; master/master_wire.py maps its events to and from protobuf.

The stream is served on the node's event loop (an `async` handler on grpc.aio,
cluster/serving/grpc_server.py), with no thread of its own: the slave's Hello, Acks and Nacks are
fed to the session as they arrive, and the next chunk is planned, read, checksummed, encoded
and written there. A put on the loop (SendMessage) wakes the stream without a thread hand-off;
a put from another thread wakes it through the loop's call_soon_threadsafe. Only a large chunk
(catch-up) is built in the pool, while the previous one is written.

Served in gRPC's pool through thread_bridge with a builder thread, a chunk crossed two or three
threads (builder -> pool thread -> loop) and an ack one (loop -> reader thread): about 0.9 ms
of a 1.2 ms round trip (docs/performance/history.md, "Where a SYNC_MASTER's time goes").
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import threading
from typing import AsyncIterator, Callable, NoReturn, Sequence

import grpc

from ha.master_session import (Acked, ChunkPlan, Connected, Disconnect, MasterSession,
                               MasterView, Send)
from ha.messages import Hello, MalformedMessage, MasterMessage
from proto import replication_pb2 as pb
from proto import replication_pb2_grpc as pb_grpc
from store.errors import OffsetOutOfRange
from common.failpoints import should_corrupt

from master import master_wire as wire
from master.master_role import MasterRole

log = logging.getLogger(__name__)
CLOSE_GRACE_S = 1.0  # a write still pending this long after a close is dropped (paused slave)


class NotAdmitted(Exception):
    """Raised by the servicer's `admit` callable for a peer that is not a member: the call
    ends with `code` and `message` before anything is read or sent."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class MasterConnection:
    """One slave's replication stream on the master, from its Hello until it closes.

    Owns: the stream's `MasterSession` (what was sent and acked, the next chunk), the outbox of
    messages the session asked to send (the Welcome) and the close reason. Reports to the
    role's `AckTracker` (connect, acks, caught up); the role's registry holds the connection
    and the role's housekeeping closes it when the slave goes silent.

    Threads and locks: the event loop (`read_from`, `feed`, `next_message`), a pool thread
    building a large chunk (`_build`), and whoever wakes or closes it (the loop, put threads,
    the role's housekeeping or stop). `_cond` (a lock) guards the session, the outbox and
    `close_reason`. Decoding, the commitlog read, the CRC and the encoding run outside it.
    `slave_id` is set on the loop once (at Connected), `last_received` on the loop and
    `bytes_sent` where a chunk is built; other threads only read them (single attributes). The
    tracker calls are made outside `_cond` (the tracker has its own lock). `on_close` and
    `on_wakeup` are set by the stream (`_Stream`) before anything is read.
    """

    def __init__(self, role: MasterRole, peer: str, member_id: str = "") -> None:
        c = role.config
        self.role = role
        self.peer = peer
        self.session = MasterSession(role.broker_name, batch_size=c.ha_transfer_batch_size,
                                     max_in_flight=c.ha_max_in_flight_bytes,
                                     heartbeat_interval_ms=c.ha_send_heartbeat_interval)
        self.slave_id = ""
        self.member_id = member_id  # who the peer proved to be; its Hello must say the same
        self._cond = threading.Lock()
        self._outbox: collections.deque[MasterMessage] = collections.deque()
        self.close_reason: str | None = None
        self.last_received = role.clock.monotonic()
        self.bytes_sent = 0
        self.on_close: Callable[[], None] = lambda: None
        self.on_wakeup: Callable[[], None] = lambda: None

    # -- slave -> master (on the loop) ---------------------------------------------------------
    async def read_from(self, requests: AsyncIterator[pb.SlaveMessage]) -> None:
        try:
            async for msg in requests:
                self.last_received = self.role.clock.monotonic()
                self.feed(msg)
                if self.close_reason is not None:
                    return
            self.close("the slave closed the stream")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the call failed under the read, or a bug: close, say why
            if not isinstance(e, grpc.RpcError):
                log.exception("replication stream from %s failed", self.peer)
            self.close(f"stream from the slave failed: {type(e).__name__}: {e}")

    def feed(self, msg: pb.SlaveMessage) -> None:
        role = self.role
        try:
            event = wire.from_slave(msg)
        except MalformedMessage as e:
            self.close(str(e))
            return
        if isinstance(event, Hello) and self.member_id and event.node_id != self.member_id:
            self.close(f"the Hello names {event.node_id!r} but the peer proved membership as "
                       f"{self.member_id!r}")
            return
        with self._cond:
            actions = self.session.on_message(event, role.view())
        for action in actions:
            if isinstance(action, Send):
                with self._cond:
                    self._outbox.append(action.message)
            elif isinstance(action, Connected):
                self.slave_id = action.slave_id
                role.tracker.connect(action.slave_id, action.start_offset)
                log.info("slave %s (%s) connected, resuming at %d", action.slave_id, self.peer,
                         action.start_offset)
            elif isinstance(action, Acked):
                role.tracker.on_ack(action.slave_id, action.offset, action.flushed_offset,
                                    role.store.max_phy_offset())
                role.on_acked()
            elif isinstance(action, Disconnect):
                self.close(action.reason)
        self.wakeup()

    # -- master -> slave (on the loop) ---------------------------------------------------------
    # A chunk up to SMALL_CHUNK (what follows single puts) is read, checksummed and encoded on
    # the loop: a thread hand-off costs more than that work. A larger one (catch-up) is built in
    # the pool, and the next one is built while it is written, so the CRC overlaps the network.
    SMALL_CHUNK = 64 * 1024
    IDLE_POLL_S = 0.5  # with nothing to send, the session is asked again (heartbeats) this often

    async def next_message(self, signal: "LoopSignal") -> "pb.MasterMessage | bytes | None":
        """The next message to write, encoded (None once closed): waits on `signal` (new data,
        an ack, a close) while the session has nothing to send."""
        loop = asyncio.get_running_loop()
        while True:
            signal.clear()  # before planning: a wake-up after this point is not lost
            planned = self._plan()
            if planned is _CLOSED:
                return None
            if isinstance(planned, _Planned):
                if planned.plan.max_bytes <= self.SMALL_CHUNK:
                    return self._build(planned)
                return await loop.run_in_executor(None, self._build, planned)
            if planned is not None:
                return wire.to_slave_wire(planned)  # from the outbox (the Welcome)
            await signal.wait(self.IDLE_POLL_S)

    def _plan(self) -> "MasterMessage | _Planned | object | None":
        """Under the lock: _CLOSED, a message of the outbox, the next chunk planned (and
        recorded as sent, so the next plan follows it), or None (nothing to send now)."""
        role, session = self.role, self.session
        with self._cond:
            if self.close_reason is not None:
                return _CLOSED
            if self._outbox:
                return self._outbox.popleft()
            view = role.view()
            now_ms = int(role.clock.monotonic() * 1000)
            plan = session.poll(view, now_ms)
            if plan is None:
                return None
            session.sent(plan, plan.max_bytes, now_ms)
            return _Planned(plan, view, session.next_send >= view.max_offset)

    def _build(self, planned: "_Planned") -> "pb.MasterMessage | bytes | None":
        """Read, checksum and encode a planned chunk, outside the lock (on the loop or in the
        pool); None (the connection closed) when its bytes cannot be read."""
        try:
            return self._build_chunk(planned)
        except Exception as e:  # a bug must end the stream with a reason, not hang it
            log.exception("building a chunk for %s failed", self.peer)
            self.close(f"master error: {e}")
            return None

    def _build_chunk(self, planned: "_Planned") -> "pb.MasterMessage | bytes | None":
        role, plan = self.role, planned.plan
        try:
            data = (role.store.read_commitlog_chunk(plan.offset, plan.max_bytes,
                                                    plan.offset + plan.max_bytes)
                    if plan.max_bytes else b"")
        except (OffsetOutOfRange, OSError) as e:  # gone (retention), or a disk read error
            self.close(f"cannot read {plan.offset}: {e}")
            return None
        if len(data) != plan.max_bytes:
            self.close(f"read {len(data)} bytes at {plan.offset}, planned {plan.max_bytes}")
            return None
        chunk = self.session.build_chunk(plan, data, planned.view)
        if data and should_corrupt("master.corrupt_next_chunk"):  # tests only
            corrupted = bytearray(data)
            corrupted[len(corrupted) // 2] ^= 0xFF  # after the CRC was computed
            chunk = dataclasses.replace(chunk, data=bytes(corrupted))
        if planned.caught_up and self.slave_id:
            role.tracker.on_transfer(self.slave_id, planned.view.max_offset)
        self.bytes_sent += len(data)
        return wire.to_slave_wire(chunk)

    def wakeup(self) -> None:
        """New data, an ack or a close: the stream plans again (from any thread)."""
        self.on_wakeup()

    def close(self, reason: str) -> None:
        with self._cond:
            if self.close_reason is not None:
                return
            self.close_reason = reason
            self.session.close(reason)
        log.warning("replication stream of %s closed: %s", self.slave_id or self.peer, reason)
        self.on_close()
        self.on_wakeup()


_CLOSED = object()


@dataclasses.dataclass(frozen=True)
class _Planned:
    """A chunk planned under the connection's lock, built outside it."""
    plan: ChunkPlan
    view: MasterView
    caught_up: bool  # the chunk ends at the master's end as the plan saw it


class LoopSignal:
    """Wakes the one coroutine that waits on it, from any thread. From the loop's own thread a
    set() is a flag and a future; from another it goes through call_soon_threadsafe, at most
    once until the loop has run it (a burst of puts writes the loop's self-pipe once).

    Made on the loop; `_flag`, `_waiter` are the loop's, `_pending` is set by other threads
    and cleared by the loop (a race costs at most one extra wake-up)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._flag = False
        self._pending = False
        self._waiter: asyncio.Future | None = None

    def set(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self._fire()
        elif not self._pending:
            self._pending = True
            try:
                self._loop.call_soon_threadsafe(self._fire)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

    def _fire(self) -> None:
        self._pending = False
        self._flag = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._flag = False

    async def wait(self, timeout: float) -> None:
        """Until set() (at once if it was since clear()), or `timeout` seconds."""
        if self._flag:
            return
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_later(timeout, _settle, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None


def _settle(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class _Stream:
    """Writes one connection's messages on the loop, in the handler's task. A large chunk
    (catch-up) is written while the next is built in the pool. When the connection closes with
    a write still pending after CLOSE_GRACE_S (a slave that stopped reading holds it in flow
    control), the task is cancelled: the write is dropped and the call ends. Everything here
    is the loop's."""

    def __init__(self, conn: MasterConnection) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self.signal = LoopSignal()
        self.writing = False
        self.dropped = False
        conn.on_close = self._closed
        conn.on_wakeup = self.signal.set

    def _closed(self) -> None:  # from any thread
        try:
            self._loop.call_soon_threadsafe(self._loop.call_later, CLOSE_GRACE_S,
                                            self._drop_stuck_write)
        except RuntimeError:
            pass  # the loop is closed: its tasks are gone with it

    def _drop_stuck_write(self) -> None:
        if self.writing and self._task is not None and not self._task.done():
            self.dropped = True
            self._task.cancel()

    async def run(self, conn: MasterConnection, context: grpc.aio.ServicerContext) -> None:
        ahead: asyncio.Future | None = None  # the next message, built while one is written
        try:
            while True:
                msg = await ahead if ahead is not None else await conn.next_message(self.signal)
                ahead = None
                if msg is None:
                    return
                if isinstance(msg, bytes) and len(msg) > conn.SMALL_CHUNK:
                    ahead = asyncio.ensure_future(conn.next_message(self.signal))
                self.writing = True
                try:
                    await context.write(msg)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # the call ended under the write (the slave went away)
                    conn.close(f"write to the slave failed: {type(e).__name__}: {e}")
                    return
                finally:
                    self.writing = False
        finally:
            if ahead is not None:
                ahead.cancel()


def add_to_server(servicer: "ReplicationServicer", server: grpc.Server) -> None:
    """Serve the stream as the generated `add_ReplicationServicer_to_server` would, with
    `master_wire.serialize` as its response serializer (chunks leave already encoded), through
    the service's generic handler only: the node registers no method
    (cluster/serving/grpc_server.py, `_GenericHandlersOnly`)."""
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.Stream, request_deserializer=pb.SlaveMessage.FromString,
        response_serializer=wire.serialize)
    service, handlers = "rmqstore.replication.v1.Replication", {"Stream": handler}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))


class ReplicationServicer(pb_grpc.ReplicationServicer):
    """Thin adapter, on the event loop: admits only members (`admit(peer, metadata)` returns
    the node id the peer proved, or raises NotAdmitted and the call ends before anything is
    read or sent), finds the current master role and serves the stream for a connection: the
    slave's messages read and the chunks written on the loop."""

    def __init__(self, master_role: Callable[[], MasterRole | None],
                 not_master_reason: Callable[[], str],
                 admit: Callable[[str, Sequence[tuple[str, str | bytes]]], str]) -> None:
        self._master_role = master_role
        self._not_master_reason = not_master_reason
        self._admit = admit

    async def Stream(self, request_iterator, context):  # noqa: N802 (gRPC naming)
        try:  # before the role: a non-member learns nothing
            member_id = self._admit(context.peer(), context.invocation_metadata() or ())
        except NotAdmitted as e:
            await _abort(context, e.code, e.message)
        role = self._master_role()
        if role is None:
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, self._not_master_reason())
        conn = MasterConnection(role, context.peer(), member_id)
        stream = _Stream(conn)
        if not role.add_connection(conn):
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION,
                         "this node is no longer master")
        reader = asyncio.ensure_future(conn.read_from(request_iterator))
        try:
            await stream.run(conn, context)
        except asyncio.CancelledError:
            if not stream.dropped:
                raise  # gRPC cancelled the call (the slave went away, the server stops)
            asyncio.current_task().uncancel()
            return  # our own cancel of a write a paused slave held: nobody reads a status
        finally:
            conn.close(conn.close_reason or "stream ended")
            role.remove_connection(conn)
            reader.cancel()
        if conn.close_reason and not conn.close_reason.startswith("the slave closed"):
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, conn.close_reason)


async def _abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str
                 ) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("grpc.aio's abort returned")  # it raises: a refused call never goes on

"""gRPC adapter of the master side: one `MasterConnection` per slave stream, driving a
`ha.master_session.MasterSession`; master/master_wire.py maps its events to and from protobuf.

The stream is served on the node's event loop (an `async` handler on grpc.aio,
cluster/node/grpc_server.py): the slave's Hello, Acks and Nacks are fed to the session on the
loop as they arrive, and chunks are written from it. A builder thread per stream plans chunks
with the session, reads them from the commitlog and checksums them (the read and the CRC stay
off the loop) and hands them to the loop, at most PREFETCH ahead of the writes. So a chunk
crosses one thread boundary on its way out (builder -> loop) and an ack none on its way in.
Served in gRPC's pool through thread_bridge, a chunk crossed two (builder -> pool thread ->
loop) and an ack one (loop -> reader thread), which cost about 0.9 ms of a 1.2 ms round trip
(tests/perf/README.md, "Where a SYNC_MASTER's time goes").
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import threading
from typing import AsyncIterator, Callable, NoReturn, Sequence

import grpc

from ha.master_session import Acked, Connected, Disconnect, MasterSession, Send
from ha.messages import Hello, MalformedMessage, MasterMessage
from proto import replication_pb2 as pb
from proto import replication_pb2_grpc as pb_grpc
from store.errors import OffsetOutOfRange
from store.failpoints import should_corrupt

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
    messages the session asked to send (the Welcome), the builder thread and the close reason.
    Reports to the role's `AckTracker` (connect, acks, caught up); the role's registry holds
    the connection and the role's housekeeping closes it when the slave goes silent.

    Threads and locks: the event loop (`read_from`, `feed`), the builder thread (`build_into`)
    and whoever closes it (the loop, the builder, the role's housekeeping or stop). `_cond`
    guards the session, the outbox and `close_reason`, and wakes the builder (new data, an ack,
    a close). Decoding, the commitlog read, the CRC and the protobuf encoding run outside it,
    so a chunk being built never holds up an ack. `slave_id` is set on the loop once (at
    Connected), `last_received` on the loop and `bytes_sent` by the builder thread; other
    threads only read them (single attributes). The tracker calls are made outside `_cond`
    (the tracker has its own lock). `on_close` is set by the stream before the builder starts.
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
        self._cond = threading.Condition()
        self._outbox: collections.deque[MasterMessage] = collections.deque()
        self.close_reason: str | None = None
        self.last_received = role.clock.monotonic()
        self.bytes_sent = 0
        self.on_close: Callable[[], None] = lambda: None

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

    # -- master -> slave (builder thread) ------------------------------------------------------
    # The builder plans, reads and checksums the next chunks while the loop writes the previous
    # one: the CRC (the costly part) overlaps the network instead of alternating with it.
    PREFETCH = 2

    def build_into(self, handoff: "Handoff") -> None:
        """The builder thread's body: built messages into `handoff` until the connection
        closes, then the end (None)."""
        try:
            while True:
                event = self._next_message()
                if event is None:
                    return
                # encoded here, outside the lock, like the CRC
                if not handoff.put(wire.to_slave_wire(event), lambda: self.close_reason is not None):
                    return
        except Exception as e:  # a bug must end the stream with a reason, not hang it
            log.exception("building chunks for %s failed", self.peer)
            self.close(f"master error: {e}")
        finally:
            handoff.end()

    def _next_message(self) -> MasterMessage | None:
        """The next message to send (None once closed): planned under the lock, read and
        checksummed outside it so acks are not held up by the CRC (the caller encodes it,
        also outside the lock)."""
        role, session = self.role, self.session
        now = lambda: int(role.clock.monotonic() * 1000)  # noqa: E731
        with self._cond:
            while True:
                if self.close_reason is not None:
                    return None
                if self._outbox:
                    return self._outbox.popleft()
                view = role.view()
                plan = session.poll(view, now())
                if plan is not None:
                    session.sent(plan, plan.max_bytes, now())
                    caught_up = session.next_send >= view.max_offset
                    break
                self._cond.wait(0.5)
        try:
            data = (role.store.commitlog.read_chunk(plan.offset, plan.max_bytes,
                                                    plan.offset + plan.max_bytes)
                    if plan.max_bytes else b"")
        except (OffsetOutOfRange, OSError) as e:  # gone (retention), or a disk read error
            self.close(f"cannot read {plan.offset}: {e}")
            return None
        if len(data) != plan.max_bytes:
            self.close(f"read {len(data)} bytes at {plan.offset}, planned {plan.max_bytes}")
            return None
        chunk = session.build_chunk(plan, data, view)
        if data and should_corrupt("master.corrupt_next_chunk"):  # tests only
            corrupted = bytearray(data)
            corrupted[len(corrupted) // 2] ^= 0xFF  # after the CRC was computed
            chunk = dataclasses.replace(chunk, data=bytes(corrupted))
        if caught_up and self.slave_id:
            role.tracker.on_transfer(self.slave_id, view.max_offset)
        self.bytes_sent += len(data)
        return chunk

    def wakeup(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def close(self, reason: str) -> None:
        with self._cond:
            if self.close_reason is not None:
                return
            self.close_reason = reason
            self.session.close(reason)
            self._cond.notify_all()
        log.warning("replication stream of %s closed: %s", self.slave_id or self.peer, reason)
        self.on_close()


class Handoff:
    """Built messages from the builder thread to the event loop, in order. At most `limit` are
    waiting or being written: the builder blocks in `put` until the loop `release`s a slot
    after a write, so a slave that stops reading stops the builder, as flow control did.

    Made on the loop. The queue is the loop's alone (the builder appends through
    call_soon_threadsafe); the semaphore is shared."""

    def __init__(self, limit: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._slots = threading.Semaphore(limit)
        self._items: asyncio.Queue[pb.MasterMessage | bytes | None] = asyncio.Queue()

    def put(self, msg: "pb.MasterMessage | bytes", closed: Callable[[], bool]) -> bool:
        """From the builder: False (nothing sent) once `closed()` says so while it waits."""
        while not self._slots.acquire(timeout=0.5):
            if closed():
                return False
        return self._to_loop(msg)

    def end(self) -> None:
        """From the builder: nothing more comes (the writer stops at it)."""
        self._to_loop(None)

    def _to_loop(self, item: "pb.MasterMessage | bytes | None") -> bool:
        try:
            self._loop.call_soon_threadsafe(self._items.put_nowait, item)
            return True
        except RuntimeError:  # the loop is closed: the node stopped, nobody writes any more
            return False

    async def get(self) -> "pb.MasterMessage | bytes | None":
        return await self._items.get()

    def release(self) -> None:
        self._slots.release()


class _Writer:
    """Writes one connection's built messages on the loop, in the handler's task. When the
    connection closes with a write still pending after CLOSE_GRACE_S (a slave that stopped
    reading holds it in flow control), the task is cancelled: the write is dropped and the
    call ends. `writing` and `dropped` are the loop's alone."""

    def __init__(self, conn: MasterConnection) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self.handoff = Handoff(conn.PREFETCH)
        self.writing = False
        self.dropped = False
        conn.on_close = self._closed

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
        while True:
            msg = await self.handoff.get()
            if msg is None:
                return
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
            self.handoff.release()


def add_to_server(servicer: "ReplicationServicer", server: grpc.Server) -> None:
    """Register the stream as the generated `add_ReplicationServicer_to_server` does, with
    `master_wire.serialize` as its response serializer: chunks leave already encoded."""
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.Stream, request_deserializer=pb.SlaveMessage.FromString,
        response_serializer=wire.serialize)
    service, handlers = "rmqstore.replication.v1.Replication", {"Stream": handler}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)


class ReplicationServicer(pb_grpc.ReplicationServicer):
    """Thin adapter, on the event loop: admits only members (`admit(peer, metadata)` returns
    the node id the peer proved, or raises NotAdmitted and the call ends before anything is
    read or sent), finds the current master role and serves the stream for a connection: the
    slave's messages read on the loop, a builder thread, the writes."""

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
        writer = _Writer(conn)
        if not role.add_connection(conn):
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION,
                         "this node is no longer master")
        reader = asyncio.ensure_future(conn.read_from(request_iterator))
        threading.Thread(target=conn.build_into, args=(writer.handoff,),
                         name=f"repl-builder-{conn.peer}", daemon=True).start()
        try:
            await writer.run(conn, context)
        except asyncio.CancelledError:
            if not writer.dropped:
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

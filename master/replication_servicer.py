"""gRPC adapter of the master side: one `MasterConnection` per slave stream, driving a
`ha.master_session.MasterSession`; master/wire.py maps its events to and from protobuf.

Threads per stream: gRPC's handler thread runs `outgoing()` (the response generator), fed by
a builder thread that plans chunks with the session, reads them from the commitlog and
checksums them; a reader thread feeds the slave's Hello, Acks and Nacks to the session.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import queue
import threading
from typing import Callable, Iterator

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


class MasterConnection:
    """One slave's replication stream on the master, from its Hello until it closes.

    Owns: the stream's `MasterSession` (what was sent and acked, the next chunk), the outbox of
    messages the session asked to send (the Welcome), the builder thread and the close reason.
    Reports to the role's `AckTracker` (connect, acks, caught up); the role's registry holds
    the connection and the role's housekeeping closes it when the slave goes silent.

    Threads and locks: the reader thread (`read_from`, `feed`), the builder thread
    (`_build_loop`) and gRPC's handler thread (`outgoing`, which only takes built messages from
    a bounded queue). `_cond` guards the session, the outbox and `close_reason`, and wakes the
    builder (new data, an ack, a close). Decoding, the commitlog read, the CRC and the protobuf
    encoding run outside it, so a chunk being built never holds up an ack. `slave_id` is set
    by the reader thread once (at Connected), `last_received` by the reader thread and
    `bytes_sent` by the builder thread; other threads only read them (single attributes). The
    tracker calls are made outside `_cond` (the tracker has its own lock).
    """

    def __init__(self, role: MasterRole, peer: str, context: grpc.ServicerContext,
                 member_id: str = "") -> None:
        c = role.config
        self.role = role
        self.peer = peer
        self.context = context
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

    # -- slave -> master (reader thread) ------------------------------------------------------
    def read_from(self, requests: Iterator[pb.SlaveMessage]) -> None:
        try:
            for msg in requests:
                self.last_received = self.role.clock.monotonic()
                self.feed(msg)
                if self.close_reason is not None:
                    return
            self.close("the slave closed the stream")
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None  # the server side's RpcError has none
            self.close(f"stream from the slave failed: {code.name if code else 'cancelled'}")
        except Exception as e:  # never leave the stream open after a bug: close and say why
            log.exception("replication stream from %s failed", self.peer)
            self.close(f"master error: {e}")

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

    # -- master -> slave ----------------------------------------------------------------------
    # A builder thread plans, reads and checksums the next chunks while gRPC's handler thread
    # sends the previous one: the CRC (the costly part) overlaps the network instead of
    # alternating with it. At most PREFETCH built messages wait.
    PREFETCH = 2

    def outgoing(self) -> Iterator[pb.MasterMessage | bytes]:
        ready: queue.Queue[pb.MasterMessage | bytes | None] = queue.Queue(self.PREFETCH)
        builder = threading.Thread(target=self._build_loop, args=(ready,),
                                   name=f"repl-builder-{self.peer}", daemon=True)
        builder.start()
        while True:
            try:
                msg = ready.get(timeout=0.5)
            except queue.Empty:
                if self.close_reason is not None:
                    return
                continue
            if msg is None:
                return
            yield msg

    def _build_loop(self, ready: "queue.Queue[pb.MasterMessage | bytes | None]") -> None:
        try:
            while True:
                event = self._next_message()
                if event is None:
                    return
                msg = wire.to_slave_wire(event)  # here, outside the lock, like the CRC
                while True:
                    try:
                        ready.put(msg, timeout=0.5)
                        break
                    except queue.Full:
                        if self.close_reason is not None:
                            return
        except Exception as e:  # a bug must end the stream with a reason, not hang it
            log.exception("building chunks for %s failed", self.peer)
            self.close(f"master error: {e}")
        finally:
            try:
                ready.put_nowait(None)
            except queue.Full:
                pass  # the handler notices close_reason on its next timeout

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
        # The handler may be blocked in gRPC flow control (a paused slave): cancel the call.
        threading.Thread(target=self._cancel_later, daemon=True).start()

    def _cancel_later(self) -> None:
        threading.Event().wait(1.0)  # give the handler a moment to end with the reason
        if self.context.is_active():
            self.context.cancel()


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
    """Thin adapter: admits only members (`admit` returns the node id the peer proved, or
    aborts the call before anything is read or sent), finds the current master role and hands
    the stream to a connection."""

    def __init__(self, master_role: Callable[[], MasterRole | None],
                 not_master_reason: Callable[[], str],
                 admit: Callable[[grpc.ServicerContext], str]) -> None:
        self._master_role = master_role
        self._not_master_reason = not_master_reason
        self._admit = admit

    def Stream(self, request_iterator, context):  # noqa: N802 (gRPC naming)
        member_id = self._admit(context)  # before the role: a non-member learns nothing
        role = self._master_role()
        if role is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, self._not_master_reason())
        conn = MasterConnection(role, context.peer(), context, member_id)
        if not role.add_connection(conn):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this node is no longer master")
        reader = threading.Thread(target=conn.read_from, args=(request_iterator,),
                                  name=f"repl-reader-{context.peer()}", daemon=True)
        reader.start()
        try:
            yield from conn.outgoing()
        finally:
            conn.close(conn.close_reason or "stream ended")
            role.remove_connection(conn)
        if conn.close_reason and not conn.close_reason.startswith("the slave closed"):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, conn.close_reason)

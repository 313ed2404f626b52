"""The master side of one slave's replication stream, without I/O.

The adapter (master/) feeds it the slave's messages (`ha.messages` events, decoded from the
wire by master/master_wire.py) and a `MasterView` snapshot of the store, asks `poll()` what to
send next, reads those bytes from the commitlog, reports them with `sent()` and has
`build_chunk()` make the Chunk. The session decides:

    Hello  -> Welcome (resume point from the epochs) + Connected     or Disconnect
    Ack    -> Acked (for the ack tracker)                            or Disconnect
    Nack   -> rewind to the re-requested offset                      or Disconnect
    poll() -> the next chunk: from next_send, at most batch_size bytes, never past the
              master's max offset, a commitlog file's end or an epoch boundary, at most
              max_in_flight bytes beyond the last ack; or a heartbeat when
              nothing was sent for heartbeat_interval_ms or the confirm offset moved.

Refusals (each ends the stream with a reason the slave logs):
- a Hello from another broker group, or a second Hello;
- a slave that has seen a later epoch than this master's (this master is stale: fenced);
- no common epoch, or a resume point below the master's oldest data;
- an Ack beyond the master's max offset (RocketMQ #3015: 5.x still lacks this check), beyond
  what was sent, or going backwards;
- a Nack outside the unacknowledged range, or too many Nacks in a row.
"""
from __future__ import annotations

import collections
import enum
from dataclasses import dataclass

from common.crc import crc32c
from .epoch import EpochCache, EpochError, resume_offset
from .messages import Ack, Chunk, Hello, MasterMessage, Nack, SlaveMessage, Welcome


@dataclass(frozen=True)
class MasterView:
    """What the session needs to know about the master's store at one moment."""
    min_offset: int
    max_offset: int
    confirm_offset: int
    epochs: EpochCache
    file_size: int


@dataclass(frozen=True)
class ChunkPlan:
    """What `poll()` decided to send next: `max_bytes` from `offset`, of one epoch."""

    offset: int
    max_bytes: int  # 0: heartbeat
    epoch: int
    epoch_start_offset: int


@dataclass(frozen=True)
class Send:
    message: MasterMessage


@dataclass(frozen=True)
class Connected:
    slave_id: str
    start_offset: int


@dataclass(frozen=True)
class Acked:
    slave_id: str
    offset: int
    flushed_offset: int


@dataclass(frozen=True)
class Disconnect:
    reason: str


MasterAction = Send | Connected | Acked | Disconnect


class MasterState(enum.Enum):
    """A master session's stage: waiting for the Hello, streaming, or closed for good."""

    AWAIT_HELLO = "await-hello"
    STREAMING = "streaming"
    CLOSED = "closed"


class MasterSession:
    """The master's side of one slave's stream (the transitions of the module docstring): owns
    the stream's state (await Hello, streaming, closed), the slave's id, what was sent
    (`next_send`, the ends of chunks not acked yet) and acked, the Nack count and the
    heartbeat and confirm-offset bookkeeping.

    Not thread-safe, and no I/O: its owner (master/replication_servicer.py's
    MasterConnection) calls it only under its own lock and carries out the actions."""

    def __init__(self, broker_name: str, *, batch_size: int, max_in_flight: int,
                 heartbeat_interval_ms: int, max_nacks: int = 3,
                 max_partial_in_flight: int = 2) -> None:
        self.broker_name = broker_name
        self.batch_size = batch_size
        self.max_in_flight = max(max_in_flight, batch_size)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_nacks = max_nacks
        self.state = MasterState.AWAIT_HELLO
        self.slave_id = ""
        self.next_send = 0
        self.acked = 0
        self.flushed = 0
        self.nacks_in_row = 0
        self.last_sent_ms: int | None = None
        self.confirm_sent = -1  # slaves learn a new confirm offset without waiting for data
        # Ends of the chunks not acknowledged yet. With this many in flight, a chunk smaller
        # than batch_size waits for an ack, so puts that arrive meanwhile share the next chunk
        # instead of queueing one small chunk each on the slave (sync puts from many threads).
        self.max_partial_in_flight = max_partial_in_flight
        self._unacked_ends: collections.deque[int] = collections.deque()
        self.close_reason = ""

    # -- from the slave --------------------------------------------------------------------
    def on_message(self, msg: SlaveMessage, view: MasterView) -> list[MasterAction]:
        if self.state is MasterState.CLOSED:
            return []
        if isinstance(msg, Hello):
            return self._on_hello(msg, view)
        if self.state is not MasterState.STREAMING:
            kind = type(msg).__name__.lower()  # "ack", "nack": the envelope's field names
            return self._close(f"{kind} before Hello")
        if isinstance(msg, Ack):
            return self._on_ack(msg, view)
        if isinstance(msg, Nack):
            return self._on_nack(msg)
        raise TypeError(f"not a slave message: {msg!r}")  # the caller's bug, not the slave's

    def _on_hello(self, h: Hello, view: MasterView) -> list[MasterAction]:
        if self.state is not MasterState.AWAIT_HELLO:
            return self._close("second Hello on one stream")
        self.slave_id = h.node_id or "?"
        if h.broker_name != self.broker_name:
            return self._close(f"slave {self.slave_id} belongs to broker {h.broker_name!r}, "
                               f"this master to {self.broker_name!r}")
        try:
            slave_epochs = EpochCache(h.epochs)
        except EpochError as e:
            return self._close(f"slave {self.slave_id} sent invalid epochs: {e}")
        if len(view.epochs) == 0:  # a node records its epoch before it serves as master
            return self._close("this master has no epoch yet")
        if slave_epochs.last_epoch > view.epochs.last_epoch:
            return self._close(f"slave {self.slave_id} has seen epoch {slave_epochs.last_epoch}, "
                               f"later than this master's {view.epochs.last_epoch}: this master is stale")
        try:
            start = resume_offset(view.epochs, view.min_offset, view.max_offset, slave_epochs,
                                  h.max_offset, slave_empty=h.max_offset == 0 and h.min_offset == 0,
                                  sync_from_last_file=h.sync_from_last_file,
                                  file_size=view.file_size)
        except EpochError as e:
            return self._close(f"slave {self.slave_id}: {e}")
        self.state = MasterState.STREAMING
        self.next_send = self.acked = start
        welcome = Welcome(
            epoch=view.epochs.last_epoch, epochs=view.epochs.entries, start_offset=start,
            master_min_offset=view.min_offset, master_max_offset=view.max_offset,
            confirm_offset=view.confirm_offset)
        return [Send(welcome), Connected(self.slave_id, start)]

    def _on_ack(self, a: Ack, view: MasterView) -> list[MasterAction]:
        if a.max_offset > view.max_offset:
            return self._close(f"slave {self.slave_id} acked {a.max_offset}, beyond this "
                               f"master's max offset {view.max_offset}")
        if a.max_offset > self.next_send:
            return self._close(f"slave {self.slave_id} acked {a.max_offset} but was only sent "
                               f"up to {self.next_send}")
        if a.max_offset < self.acked:
            return self._close(f"slave {self.slave_id} ack went backwards: {a.max_offset} < {self.acked}")
        if a.max_offset > self.acked:
            self.nacks_in_row = 0
        self.acked = a.max_offset
        ends = self._unacked_ends
        while ends and ends[0] <= a.max_offset:
            ends.popleft()
        self.flushed = a.flushed_offset
        return [Acked(self.slave_id, a.max_offset, a.flushed_offset)]

    def _on_nack(self, n: Nack) -> list[MasterAction]:
        if not self.acked <= n.offset < self.next_send:
            return self._close(f"slave {self.slave_id} re-requested {n.offset}, outside the "
                               f"unacknowledged range [{self.acked}, {self.next_send})")
        self.nacks_in_row += 1
        if self.nacks_in_row > self.max_nacks:
            return self._close(f"slave {self.slave_id} re-requested {self.nacks_in_row} times in a "
                               f"row (last: {n.reason})")
        self.next_send = n.offset
        self._unacked_ends.clear()  # everything from the Nack on is sent again
        return []

    # -- to the slave ----------------------------------------------------------------------
    def poll(self, view: MasterView, now_ms: int) -> ChunkPlan | None:
        """The next chunk to send, a heartbeat, or None (wait for new data or acks)."""
        if self.state is not MasterState.STREAMING:
            return None
        available = view.max_offset - self.next_send
        if (available > 0 and self.next_send - self.acked < self.max_in_flight
                and (available >= self.batch_size
                     or len(self._unacked_ends) < self.max_partial_in_flight)):
            entry = view.epochs.entry_at(self.next_send)
            if entry is None:  # bytes older than the first epoch (a store that predates
                entry = view.epochs.entries[0]  # epochs): they belong to the first one
            file_end = (self.next_send // view.file_size + 1) * view.file_size
            end = min(view.max_offset, file_end)
            boundary = view.epochs.next_boundary_after(self.next_send)
            if boundary is not None:
                end = min(end, boundary)
            room = self.max_in_flight - (self.next_send - self.acked)
            self.confirm_sent = max(self.confirm_sent, view.confirm_offset)
            return ChunkPlan(self.next_send, min(self.batch_size, end - self.next_send, room),
                             entry.epoch, entry.start_offset)
        if (self.last_sent_ms is None or now_ms - self.last_sent_ms >= self.heartbeat_interval_ms
                or view.confirm_offset > self.confirm_sent):
            self.confirm_sent = max(self.confirm_sent, view.confirm_offset)
            last = view.epochs.last
            return ChunkPlan(self.next_send, 0, last.epoch if last else 0,
                             last.start_offset if last else 0)
        return None

    def build_chunk(self, plan: ChunkPlan, data: bytes, view: MasterView) -> Chunk:
        """The Chunk for `plan` (pure: callable outside the caller's lock; the CRC is the
        costly part). `data` must be exactly the planned bytes; the Chunk holds that same
        object, not a copy."""
        return Chunk(offset=plan.offset, data=data, epoch=plan.epoch,
                     epoch_start_offset=plan.epoch_start_offset,
                     confirm_offset=view.confirm_offset, master_max_offset=view.max_offset,
                     crc32c=crc32c(data) if data else 0)

    def sent(self, plan: ChunkPlan, nbytes: int, now_ms: int) -> None:
        """Record `plan` as sent (call right after poll(), before the bytes are read, so the
        next poll can plan the following chunk while this one is built)."""
        if plan.offset == self.next_send:
            self.next_send += nbytes
            if nbytes:
                self._unacked_ends.append(self.next_send)
        self.last_sent_ms = now_ms

    def close(self, reason: str) -> list[MasterAction]:
        return self._close(reason)

    def _close(self, reason: str) -> list[MasterAction]:
        self.state = MasterState.CLOSED
        self.close_reason = reason
        return [Disconnect(reason)]

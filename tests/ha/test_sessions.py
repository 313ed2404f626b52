"""MasterSession and SlaveSession run as a pair in memory, exchanging `ha.messages` events:
handshake, transfer, CRC resends, fencing and refusals, with every chunk checked against the
transfer rules. (The protobuf mapping of the events is tested in tests/master and tests/slave.)"""
from __future__ import annotations

import collections
import dataclasses
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ha import master_session as ms
from ha import slave_session as ss
from common.crc import crc32c
from ha.epoch import EpochCache, EpochEntry
from ha.messages import Ack, Chunk, Hello, MasterMessage, Nack, SlaveMessage, Welcome

FS = 64  # simulated commitlog file size
BROKER = "broker-a"


def pattern(writer: int, offset: int, n: int) -> bytes:
    """Bytes that depend on who wrote them and where: two writers differ at every offset."""
    return bytes((writer * 131 + o * 7 + (o >> 8)) & 0xFF for o in range(offset, offset + n))


class MemLog:
    """A replica's commitlog bytes [min_offset, max_offset) and its epoch list."""

    def __init__(self, min_offset: int = 0) -> None:
        self.min_offset = min_offset
        self.data = bytearray()
        self.epochs = EpochCache()
        self.confirm = 0
        self.fresh = True  # an empty store creates its first file wherever the first append lands

    @property
    def max_offset(self) -> int:
        return self.min_offset + len(self.data)

    def new_epoch(self, epoch: int) -> MemLog:
        self.epochs.append(epoch, self.max_offset)
        return self

    def write(self, n: int, writer: int | None = None) -> MemLog:
        """Append n bytes in the current epoch, written by `writer` (default: its master)."""
        writer = self.epochs.last_epoch if writer is None else writer
        self.data += pattern(writer, self.max_offset, n)
        self.fresh = False
        return self

    def read(self, offset: int, n: int) -> bytes:
        assert self.min_offset <= offset and offset + n <= self.max_offset
        return bytes(self.data[offset - self.min_offset:offset - self.min_offset + n])

    def append_at(self, offset: int, data: bytes) -> None:
        if self.fresh and not self.data:
            self.min_offset = offset
        assert offset == self.max_offset, f"Append at {offset}, log ends at {self.max_offset}"
        self.data += data
        self.fresh = False

    def truncate(self, offset: int) -> None:  # the adapter's order: epochs first, then the log
        assert self.min_offset <= offset <= self.max_offset
        self.epochs.truncate_from(offset)
        del self.data[offset - self.min_offset:]

    def drop_below(self, offset: int) -> MemLog:
        """Delete old files: the log now starts at `offset` (epoch entries stay)."""
        del self.data[:offset - self.min_offset]
        self.min_offset = offset
        return self

    def prefix(self, end: int) -> MemLog:
        """A replica that received [min_offset, end) of this log (and the epochs of those bytes)."""
        copy = MemLog(self.min_offset)
        copy.data = bytearray(self.read(self.min_offset, end - self.min_offset))
        copy.epochs = EpochCache(e for e in self.epochs.entries if e.start_offset < end)
        copy.fresh = not copy.data
        return copy


def history(*parts: tuple[int, int], min_offset: int = 0) -> MemLog:
    """A master log: (epoch, bytes written in it) for each term, then files below min deleted."""
    log = MemLog()
    for epoch, n in parts:
        log.new_epoch(epoch).write(n)
    return log.drop_below(min_offset)


def flip(msg: Chunk, at: int = 0) -> Chunk:
    """The same chunk with one data byte flipped and the original CRC."""
    data = bytearray(msg.data)
    data[at % len(data)] ^= 0xFF
    return dataclasses.replace(msg, data=bytes(data))


class Link:
    """A master session and a slave session connected by two in-memory queues."""

    def __init__(self, mlog: MemLog, slog: MemLog | None = None, *, file_size: int = FS,
                 batch: int = 16, in_flight: int = 1 << 20, heartbeat_ms: int = 1000,
                 sync_from_last_file: bool = False, max_crc_failures: int = 3) -> None:
        self.mlog, self.slog = mlog, slog or MemLog()
        self.file_size = file_size
        self.master = ms.MasterSession(BROKER, batch_size=batch, max_in_flight=in_flight,
                                       heartbeat_interval_ms=heartbeat_ms)
        self.slave = ss.SlaveSession(f"{BROKER}:1", BROKER, epochs=self.slog.epochs,
                                     min_offset=self.slog.min_offset,
                                     max_offset=self.slog.max_offset, file_size=file_size,
                                     sync_from_last_file=sync_from_last_file,
                                     max_crc_failures=max_crc_failures)
        self.now = 0
        self.confirm: int | None = None  # the view's confirm offset; None: the master's max
        self.tamper: Callable[[int, Chunk], Chunk | None] | None = None
        self.data_chunks = 0
        self.sent: list[tuple[ms.ChunkPlan, bytes]] = []
        self.received: list[tuple[MasterMessage, list]] = []  # by the slave, with its answer
        self.truncated: list[int] = []
        self.appends: list[int] = []
        self.start_offset: int | None = None
        self.closed: tuple[str, str] | None = None  # (side, reason)
        self.to_slave: collections.deque[MasterMessage] = collections.deque()
        self.to_master: collections.deque[SlaveMessage] = collections.deque([self.slave.start()])

    def view(self) -> ms.MasterView:
        m = self.mlog
        confirm = m.max_offset if self.confirm is None else self.confirm
        return ms.MasterView(m.min_offset, m.max_offset, confirm, m.epochs, self.file_size)

    def pump(self) -> Link:
        """Exchange messages until nothing moves or a side disconnects."""
        for _ in range(100_000):
            moved = self.deliver_to_master()
            moved |= self.send_all()
            moved |= self.deliver_to_slave()
            if self.closed or not moved:
                return self
        raise AssertionError("the sessions never settled")

    def deliver_to_master(self) -> bool:
        moved = bool(self.to_master)
        while self.to_master and not self.closed:
            for action in self.master.on_message(self.to_master.popleft(), self.view()):
                if isinstance(action, ms.Send):
                    self.to_slave.append(action.message)
                elif isinstance(action, ms.Connected):
                    self.start_offset = action.start_offset
                elif isinstance(action, ms.Disconnect):
                    self.closed = ("master", action.reason)
        return moved

    def send_all(self) -> bool:
        """Everything the master would send now (chunks pile up in flight, as on a stream)."""
        moved, view = False, self.view()
        while not self.closed and (plan := self.master.poll(view, self.now)) is not None:
            data = b""
            if plan.max_bytes:
                file_end = (plan.offset // self.file_size + 1) * self.file_size
                data = self.mlog.read(plan.offset, min(plan.max_bytes, file_end - plan.offset))
                self.check_chunk(plan, data)
            msg = self.master.build_chunk(plan, data, view)
            self.master.sent(plan, len(data), self.now)
            assert self.master.next_send - self.master.acked <= self.master.max_in_flight
            self.sent.append((plan, data))
            if data and self.tamper is not None:
                msg = self.tamper(self.data_chunks, msg)
                self.data_chunks += 1
            if msg is not None:
                self.to_slave.append(msg)
            moved = True
        return moved

    def check_chunk(self, plan: ms.ChunkPlan, data: bytes) -> None:
        first, last = plan.offset, plan.offset + len(data) - 1
        assert 0 < len(data) <= self.master.batch_size
        assert first // self.file_size == last // self.file_size, "chunk crosses a file"
        entry = self.mlog.epochs.entry_at(first)
        assert entry == self.mlog.epochs.entry_at(last), "chunk crosses an epoch"
        assert (plan.epoch, plan.epoch_start_offset) == (entry.epoch, entry.start_offset)

    def deliver_to_slave(self) -> bool:
        moved = bool(self.to_slave)
        while self.to_slave and not self.closed:
            msg = self.to_slave.popleft()
            actions = self.slave.on_message(msg)
            self.received.append((msg, actions))
            for action in actions:
                self.apply(action)
        return moved

    def apply(self, action) -> None:
        s = self.slog
        if isinstance(action, ss.Append):
            s.append_at(action.offset, action.data)
            self.appends.append(action.offset)
        elif isinstance(action, ss.Truncate):
            s.truncate(action.offset)
            self.truncated.append(action.offset)
        elif isinstance(action, ss.RecordEpoch):
            s.epochs.append(action.epoch, action.start_offset)
        elif isinstance(action, ss.SetConfirm):
            s.confirm = action.offset
        elif isinstance(action, ss.SendAck):
            self.to_master.append(ack(action.offset))
        elif isinstance(action, ss.SendNack):
            self.to_master.append(Nack(action.offset, action.reason))
        elif isinstance(action, ss.Disconnect):
            self.closed = ("slave", action.reason)

    def assert_in_sync(self, start: int | None = None) -> None:
        """The slave holds the master's bytes from where it started, and epochs of the master."""
        assert self.closed is None, self.closed
        s, m = self.slog, self.mlog
        if start is not None:
            assert self.start_offset == start
        if s.fresh:  # nothing to copy: the slave started at the master's end
            assert self.start_offset == m.max_offset and self.slave.expected_offset == m.max_offset
        else:
            assert s.max_offset == m.max_offset == self.slave.expected_offset
            assert bytes(s.data) == m.read(s.min_offset, len(s.data))
        assert s.epochs.entries == self.slave.epochs.entries
        assert set(s.epochs.entries) <= set(m.epochs.entries)


def entries(pairs) -> tuple[EpochEntry, ...]:
    return tuple(EpochEntry(e, s) for e, s in pairs)


def ack(offset: int, flushed: int | None = None) -> Ack:
    return Ack(offset, offset if flushed is None else flushed)


def nack(offset: int) -> Nack:
    return Nack(offset, "test")


def hello(max_offset: int = 0, epochs=(), broker: str = BROKER) -> Hello:
    return Hello(node_id=f"{broker}:1", broker_name=broker, max_offset=max_offset, min_offset=0,
                 epochs=entries(epochs), sync_from_last_file=False)


def chunk(offset: int, data: bytes, epoch: int, epoch_start: int) -> Chunk:
    return Chunk(offset=offset, data=data, epoch=epoch, epoch_start_offset=epoch_start,
                 confirm_offset=0, master_max_offset=0, crc32c=crc32c(data))


def handshake(link: Link) -> Link:
    """Hello -> Welcome -> first Ack, and nothing else."""
    link.deliver_to_master()
    link.deliver_to_slave()
    link.deliver_to_master()
    return link


def welcome_to(link: Link) -> Welcome:
    link.deliver_to_master()
    msg = link.to_slave.popleft()
    assert isinstance(msg, Welcome)
    return msg


def streaming_master(mlog: MemLog, *, sent: int, acked: int = 0) -> Link:
    """A master that sent [0, sent) to an empty slave, which acked [0, acked)."""
    link = Link(mlog, batch=sent)
    link.deliver_to_master()
    link.to_slave.clear()
    plan = link.master.poll(link.view(), 0)
    link.master.sent(plan, sent, 0)
    if acked:
        link.master.on_message(ack(acked), link.view())
    assert (link.master.acked, link.master.next_send) == (acked, sent)
    return link


def data_of(link: Link) -> list[tuple[int, int]]:
    return [(p.offset, len(d)) for p, d in link.sent if d]


# -- 1. empty slaves ------------------------------------------------------------------------
@pytest.mark.parametrize("min_offset", [0, FS])
@pytest.mark.parametrize("batch", [1, 7, 16, 100])
def test_empty_slave_copies_from_the_master_min_offset(min_offset, batch):
    mlog = history((1, 70), (3, 45), (4, 90), min_offset=min_offset)
    link = Link(mlog, batch=batch).pump()
    link.assert_in_sync(start=min_offset)
    assert link.slog.min_offset == min_offset
    assert link.slog.epochs.entries == mlog.epochs.entries  # all three epochs have bytes above min


def test_empty_slave_with_sync_from_last_file_starts_at_the_last_file():
    mlog = history((1, 100), (2, 150))  # max 250, last file starts at 192
    link = Link(mlog, sync_from_last_file=True).pump()
    link.assert_in_sync(start=192)
    assert link.slog.epochs.entries == (EpochEntry(2, 100),)
    assert min(p.offset for p, _ in link.sent) == 192


def test_chunks_stop_at_batch_size_file_end_and_epoch_start():
    link = Link(history((1, 40), (2, 100)), batch=30).pump()
    link.assert_in_sync(start=0)
    # 30 | 10 up to epoch 2 at 40 | 24 up to the file end at 64 | 30 | 10 to 128 | 12 to 140
    assert data_of(link) == [(0, 30), (30, 10), (40, 24), (64, 30), (94, 30), (124, 4), (128, 12)]


# -- 2. slaves with a prefix ----------------------------------------------------------------
def test_slave_behind_in_the_same_epoch_resumes_at_its_own_max():
    mlog = history((1, 30), (2, 120))
    link = Link(mlog, mlog.prefix(90)).pump()
    link.assert_in_sync(start=90)
    assert link.truncated == [] and link.appends[0] == 90
    assert link.slog.epochs.entries == mlog.epochs.entries


def test_slave_already_equal_gets_only_heartbeats():
    mlog = history((1, 30), (2, 120))
    link = Link(mlog, mlog.prefix(150)).pump()
    link.assert_in_sync(start=150)
    assert link.sent and all(p.max_bytes == 0 and d == b"" for p, d in link.sent)
    assert link.appends == [] and link.truncated == []


# -- 3. divergence --------------------------------------------------------------------------
def test_old_master_rejoining_is_cut_to_the_consistent_point():
    mlog = history((1, 100), (2, 200))  # the new master took over at 100 in epoch 2
    old = mlog.prefix(100).write(50, writer=77)  # the old master wrote [100, 150) alone
    link = Link(mlog, old)
    handshake(link)
    welcome = link.received[0][0]
    assert isinstance(welcome, Welcome) and welcome.start_offset == 100
    assert link.received[0][1][0] == ss.Truncate(100)
    link.pump()
    link.assert_in_sync(start=100)
    assert link.truncated == [100]
    assert link.slog.epochs.entries == mlog.epochs.entries


def test_slave_that_saw_a_later_epoch_refuses_the_stale_master():
    mlog = history((1, 100), (2, 50))
    later = mlog.prefix(100).new_epoch(5).write(20, writer=5)
    link = Link(mlog, later).pump()
    assert link.closed[0] == "master" and "this master is stale" in link.closed[1]
    assert link.to_slave == collections.deque() and link.received == []


@pytest.mark.parametrize("private_bytes", [50, 0])
def test_private_epoch_of_a_lower_number_is_cut_away(private_bytes):
    # Node A had [0, 100) of epoch 1 when it became master in epoch 2 (and wrote [100, 150)
    # alone, or nothing); node B had [0, 120) of epoch 1 and became master in epoch 3 at 120.
    mlog = history((1, 120), (3, 60))
    link = Link(mlog, mlog.prefix(100).new_epoch(2).write(private_bytes)).pump()
    link.assert_in_sync(start=100)


# -- 4. fencing on the slave ----------------------------------------------------------------
@pytest.mark.parametrize("change, reason", [
    (dict(epoch=1, epochs=[(1, 0)]), "stale master: its epoch 1 is older"),
    (dict(epoch=3), "disagrees with its epoch list"),
    (dict(start_offset=10), "master says resume at 10 but the epochs give 20"),
    (dict(epochs=[(2, 0), (1, 10)]), "invalid epochs"),
])
def test_slave_refuses_a_welcome_it_cannot_trust(change, reason):
    mlog = history((1, 10), (2, 30))
    link = Link(mlog, mlog.prefix(20))
    change = dict(change)
    if "epochs" in change:
        change["epochs"] = entries(change["epochs"])
    msg = dataclasses.replace(welcome_to(link), **change)
    actions = link.slave.on_message(msg)
    assert len(actions) == 1 and isinstance(actions[0], ss.Disconnect)
    assert reason in actions[0].reason
    assert link.slave.on_message(chunk(20, b"x", 2, 10)) == []  # closed for good


# -- 5. CRC failures ------------------------------------------------------------------------
def test_corrupted_chunk_is_nacked_and_resent():
    mlog = history((1, 40), (2, 90))
    link = Link(mlog, batch=10)
    link.tamper = lambda n, msg: flip(msg) if n == 3 else msg
    link.pump()
    link.assert_in_sync(start=0)
    at_30 = [a for m, a in link.received if isinstance(m, Chunk) and m.offset == 30]
    assert len(at_30) == 2  # the corrupted chunk and the resent one
    assert len(at_30[0]) == 1 and isinstance(at_30[0][0], ss.SendNack) and at_30[0][0].offset == 30
    assert ss.Append(30, mlog.read(30, 10)) in at_30[1]
    dropped = [m.offset for m, a in link.received if a == []]
    assert dropped and all(o > 30 for o in dropped)  # in flight after the bad one
    assert link.appends == sorted(set(link.appends)) and link.master.nacks_in_row == 0


def test_too_many_crc_failures_in_a_row_end_the_slave():
    link = Link(history((1, 100)), batch=10)
    link.tamper = lambda n, msg: flip(msg, n)
    link.pump()
    assert link.closed == ("slave", "4 chunks in a row failed their CRC check")
    assert link.appends == [] and link.slog.max_offset == 0


def test_master_refuses_too_many_nacks_in_a_row():
    link = Link(history((1, 100)), batch=10, max_crc_failures=100)
    link.tamper = lambda n, msg: flip(msg)
    link.pump()
    assert link.closed[0] == "master" and "re-requested 4 times in a row" in link.closed[1]


@pytest.mark.parametrize("offset", [5, 30, 99])
def test_master_refuses_a_nack_outside_the_unacknowledged_range(offset):
    link = streaming_master(history((1, 100)), sent=30, acked=10)
    actions = link.master.on_message(nack(offset), link.view())
    assert "outside the unacknowledged range [10, 30)" in actions[0].reason


def test_nack_inside_the_range_rewinds_the_master():
    link = streaming_master(history((1, 100)), sent=30, acked=10)
    assert link.master.on_message(nack(20), link.view()) == []
    assert link.master.poll(link.view(), 0).offset == 20


# -- 6. refusals by the master --------------------------------------------------------------
@pytest.mark.parametrize("offset, reason", [
    (101, "acked 101, beyond this master's max offset 100"),  # RocketMQ #3015
    (50, "acked 50 but was only sent up to 30"),
    (5, "ack went backwards: 5 < 10"),
])
def test_master_refuses_impossible_acks(offset, reason):
    link = streaming_master(history((1, 100)), sent=30, acked=10)
    actions = link.master.on_message(ack(offset), link.view())
    assert actions == [ms.Disconnect(f"slave {BROKER}:1 {reason}")]
    assert link.master.state is ms.MasterState.CLOSED
    assert link.master.poll(link.view(), 10_000) is None


def test_master_records_acks_with_the_flushed_offset():
    link = streaming_master(history((1, 100)), sent=30)
    assert link.master.on_message(ack(20, 12), link.view()) == [ms.Acked(f"{BROKER}:1", 20, 12)]
    assert link.master.on_message(ack(20, 20), link.view()) == [ms.Acked(f"{BROKER}:1", 20, 20)]


@pytest.mark.parametrize("messages, reason", [
    ([ack(0)], "ack before Hello"),
    ([nack(0)], "nack before Hello"),
    ([hello(), hello()], "second Hello on one stream"),
    ([hello(broker="broker-b")], "belongs to broker 'broker-b'"),
    ([hello(10, [(2, 0), (2, 5)])], "sent invalid epochs"),
    ([hello(10, [(2, 5), (3, 0)])], "sent invalid epochs"),
    ([hello(10)], "no common epoch"),
    ([hello(10, [(1, 0)])], "slave would resume at 10 but the master's log starts at 64"),
    ([hello(10, [(7, 0)])], "has seen epoch 7, later than this master's 2: this master is stale"),
])
def test_master_refuses_a_bad_handshake(messages, reason):
    master = ms.MasterSession(BROKER, batch_size=16, max_in_flight=64, heartbeat_interval_ms=100)
    mlog = history((1, 100), (2, 50), min_offset=FS)
    view = ms.MasterView(mlog.min_offset, mlog.max_offset, 0, mlog.epochs, FS)
    actions = [a for m in messages for a in master.on_message(m, view)]
    assert isinstance(actions[-1], ms.Disconnect) and reason in actions[-1].reason
    assert master.on_message(ack(0), view) == []


# -- 7. chunk ordering on the slave ---------------------------------------------------------
@pytest.mark.parametrize("msg, reason", [
    (chunk(25, b"abc", 2, 10), "chunk at 25 but this slave ends at 20"),
    (chunk(20, b"abc", 1, 0), "chunk of epoch 1 starting at 0 does not match"),
    (chunk(20, b"abc", 2, 15), "chunk of epoch 2 starting at 15 does not match"),
    (chunk(20, b"abc", 4, 20), "chunk of epoch 4 from a master in epoch 3"),
    (chunk(20, b"abc", 3, 21), "claims epoch 3 starting later, at 21"),
])
def test_slave_refuses_chunks_out_of_order(msg, reason):
    mlog = history((1, 10), (2, 10), (3, 0))  # epoch 3 has not written yet
    link = handshake(Link(mlog, mlog.prefix(20)))
    assert link.slave.state is ss.SlaveState.FOLLOWING
    actions = link.slave.on_message(msg)
    assert isinstance(actions[-1], ss.Disconnect) and reason in actions[-1].reason


def test_slave_records_a_later_epoch_before_appending():
    mlog = history((1, 10), (2, 10), (3, 0))
    link = handshake(Link(mlog, mlog.prefix(20)))
    actions = link.slave.on_message(chunk(20, b"abc", 3, 20))
    assert actions[:2] == [ss.RecordEpoch(3, 20), ss.Append(20, b"abc")]


@pytest.mark.parametrize("started", [False, True])
def test_slave_refuses_a_chunk_before_the_welcome(started):
    slave = ss.SlaveSession("n", BROKER, epochs=EpochCache(), min_offset=0, max_offset=0,
                            file_size=FS)
    if started:
        slave.start()
    actions = slave.on_message(chunk(0, b"abc", 1, 0))
    assert isinstance(actions[0], ss.Disconnect) and "before the handshake" in actions[0].reason


def test_slave_refuses_a_second_welcome():
    link = handshake(Link(history((1, 10))))
    actions = link.slave.on_message(link.received[0][0])
    assert "unexpected Welcome in state following" in actions[0].reason


def test_sessions_take_only_their_peer_s_messages():
    link = handshake(Link(history((1, 10))))
    with pytest.raises(TypeError, match="not a master message"):
        link.slave.on_message(ack(0))  # a bug in the caller, not a peer to disconnect
    with pytest.raises(TypeError, match="not a slave message"):
        link.master.on_message(chunk(0, b"", 1, 0), link.view())


def test_slave_closed_from_outside_ignores_what_follows():
    mlog = history((1, 10), (2, 10))
    link = handshake(Link(mlog, mlog.prefix(20)))
    assert link.slave.close("garbled") == [ss.Disconnect("garbled")]
    assert link.slave.state is ss.SlaveState.CLOSED and link.slave.close_reason == "garbled"
    assert link.slave.on_message(chunk(20, b"abc", 2, 10)) == []


def test_chunks_carry_the_bytes_they_were_given():
    mlog = history((1, 100))
    link = handshake(Link(mlog, batch=32))
    plan = link.master.poll(link.view(), 0)
    data = mlog.read(plan.offset, plan.max_bytes)
    built = link.master.build_chunk(plan, data, link.view())
    assert built.data is data and built.crc32c == crc32c(data)  # no copy of up to a MiB
    appends = [a for a in link.slave.on_message(built) if isinstance(a, ss.Append)]
    assert appends == [ss.Append(0, data)] and appends[0].data is data


# -- 8. flow control ------------------------------------------------------------------------
def test_master_waits_for_acks_beyond_max_in_flight():
    link = handshake(Link(history((1, 500)), batch=20, in_flight=50))
    link.send_all()
    assert data_of(link) == [(0, 20), (20, 20), (40, 10)]
    assert link.master.poll(link.view(), link.now) is None
    link.master.on_message(ack(20), link.view())
    # 20 more bytes of window, but the chunk stops at the end of the first file (FS = 64)
    assert link.master.poll(link.view(), link.now) == ms.ChunkPlan(50, 14, 1, 0)


def test_small_window_still_copies_everything():
    link = Link(history((1, 300), (2, 200)), batch=32, in_flight=40)
    link.pump()  # send_all asserts next_send - acked <= max_in_flight after every chunk
    link.assert_in_sync(start=0)
    assert max(n for _, n in data_of(link)) == 32


# -- 9. heartbeats --------------------------------------------------------------------------
def test_heartbeat_after_the_interval_or_a_new_confirm_offset():
    mlog = history((1, 100))
    link = handshake(Link(mlog, mlog.prefix(100), heartbeat_ms=500))
    link.confirm = 60
    first = link.master.poll(link.view(), 0)  # never sent anything yet
    assert first == ms.ChunkPlan(100, 0, 1, 0)
    link.master.build_chunk(first, b"", link.view())
    link.master.sent(first, 0, 0)
    assert link.master.poll(link.view(), 499) is None
    assert link.master.poll(link.view(), 500) == first
    link.confirm = 80
    plan = link.master.poll(link.view(), 1)
    assert plan is not None and plan.max_bytes == 0
    beat = link.master.build_chunk(plan, b"", link.view())
    assert beat.confirm_offset == 80 and beat.data == b""
    assert link.slave.on_message(beat) == [ss.SetConfirm(80)]  # the periodic ack answers it
    # the slave never confirms beyond its own end
    beat = link.master.build_chunk(plan, b"", ms.MasterView(0, 150, 150, mlog.epochs, FS))
    assert link.slave.on_message(beat) == [ss.SetConfirm(100)]


def test_confirm_offset_reaches_the_slave_without_new_data():
    mlog = history((1, 100))
    link = Link(mlog, mlog.prefix(100))
    link.confirm = 40
    link.pump()
    assert link.slog.confirm == 40
    link.confirm = 100
    link.pump()
    assert link.slog.confirm == 100 and link.appends == []


def test_new_data_flows_and_a_new_term_is_followed_after_reconnecting():
    mlog = history((1, 50))
    link = Link(mlog).pump()
    mlog.write(30)  # the same master writes on
    link.pump()
    link.assert_in_sync(start=0)
    mlog.new_epoch(2).write(40)  # a new term is a new master role: its streams are new
    link = Link(mlog, link.slog).pump()
    link.assert_in_sync(start=80)
    assert link.slog.epochs.entries == mlog.epochs.entries


# -- 10. random histories -------------------------------------------------------------------
@st.composite
def scenarios(draw):
    file_size = draw(st.integers(8, 64))
    epochs = sorted(draw(st.sets(st.integers(1, 30), min_size=1, max_size=4)))
    sizes = [sum(draw(st.lists(st.integers(1, 25), min_size=1, max_size=4))) for _ in epochs]
    mlog = history(*zip(epochs, sizes))
    mlog.drop_below(draw(st.integers(0, mlog.max_offset // file_size)) * file_size)
    kind = draw(st.sampled_from(["empty", "prefix", "diverged"]))
    cuts = [e.start_offset for e in mlog.epochs.entries[1:] if e.start_offset >= mlog.min_offset]
    slog, sync_last, start = MemLog(), False, mlog.min_offset
    if kind == "diverged" and cuts:  # it got epoch k-1 up to where epoch k began, then more alone
        start = draw(st.sampled_from(cuts))
        slog = mlog.prefix(start).write(draw(st.integers(1, 40)), writer=99)
    elif kind == "prefix":
        start = draw(st.integers(mlog.min_offset, mlog.max_offset))
        slog = mlog.prefix(start)
    else:
        kind, sync_last = "empty", draw(st.booleans())
        if sync_last:
            start = max(mlog.min_offset, mlog.max_offset - mlog.max_offset % file_size)
    batch = draw(st.integers(1, 40))
    in_flight = draw(st.integers(1, 120))
    corrupt = draw(st.none() | st.integers(0, 10))
    return mlog, slog, kind, start, sync_last, file_size, batch, in_flight, corrupt


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_histories_end_identical(scenario):
    mlog, slog, kind, start, sync_last, file_size, batch, in_flight, corrupt = scenario
    link = Link(mlog, slog, file_size=file_size, batch=batch, in_flight=in_flight,
                sync_from_last_file=sync_last)
    link.tamper = lambda n, msg: flip(msg, n) if n == corrupt else msg
    link.pump()
    link.assert_in_sync(start=start)  # Append lands exactly at the slave's end (MemLog asserts)
    assert link.truncated == ([start] if kind == "diverged" else [])
    entries = mlog.epochs.entries
    ends = [e.start_offset for e in entries[1:]] + [mlog.max_offset]
    kept = [e for e in entries if kind != "empty" and e.start_offset < start]  # had them before
    copied = [e for e, end in zip(entries, ends) if end > start and e not in kept]
    assert list(link.slog.epochs.entries) == kept + copied

"""The slave's ReplicationClient against a master stream served by a real gRPC server on
127.0.0.1: the client runs on an event loop of its own thread, as on a node's server loop.

The master here is a plain handler that says Welcome and sends what the test gives it, so the
test decides what the slave sees and records every message the slave sends back."""
from __future__ import annotations

import asyncio
import queue
import threading
import time
from concurrent import futures

import grpc
import pytest

from ha.epoch import EpochCache, EpochEntry
from ha.messages import Chunk, Welcome
from common.crc import crc32c
from master import master_wire
from proto import replication_pb2 as pb
from slave.replication_client import ReplicationClient
from common.clock import SYSTEM_CLOCK
from store.epoch_file import EpochFile
from store.message_store import MessageStore
from tests.support.small_store import config, msg
from tests.support.waiting import wait_until


class FakeMaster:
    """Serves one replication stream: Welcome (epoch 1 from offset 0), then whatever is put
    in `outbox`; records each message from the slave with the time it arrived."""

    def __init__(self, master_max: int) -> None:
        self.master_max = master_max
        self.outbox: queue.Queue[Chunk | None] = queue.Queue()
        self.received: list[tuple[float, pb.SlaveMessage]] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        handler = grpc.stream_stream_rpc_method_handler(
            self._stream, request_deserializer=pb.SlaveMessage.FromString,
            response_serializer=master_wire.serialize)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "rmqstore.replication.v1.Replication", {"Stream": handler}),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _stream(self, requests, context):
        first = next(requests)
        self.received.append((time.monotonic(), first))
        threading.Thread(target=self._read, args=(requests,), daemon=True).start()
        yield master_wire.to_slave_wire(Welcome(
            epoch=1, epochs=(EpochEntry(1, 0),), start_offset=0, master_min_offset=0,
            master_max_offset=self.master_max, confirm_offset=0))
        while (item := self.outbox.get()) is not None:
            yield master_wire.to_slave_wire(item)

    def _read(self, requests) -> None:
        try:
            for request in requests:
                self.received.append((time.monotonic(), request))
        except grpc.RpcError:
            pass

    def acks(self) -> list[tuple[float, int]]:
        return [(t, m.ack.max_offset) for t, m in self.received if m.WhichOneof("body") == "ack"]

    def stop(self) -> None:
        self.outbox.put(None)
        self.server.stop(0)


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def records(tmp_path, n: int) -> bytes:
    """The commitlog bytes of `n` messages, written by a real store."""
    store = MessageStore(config(tmp_path / "source"))
    store.start()
    try:
        assert store.put_messages([msg(i) for i in range(n)]).ok
        return store.commitlog.read_chunk(0, store.max_phy_offset())
    finally:
        store.shutdown()


def chunk(data: bytes, master_max: int) -> Chunk:
    return Chunk(offset=0, data=data, epoch=1, epoch_start_offset=0, confirm_offset=0,
                 master_max_offset=master_max, crc32c=crc32c(data))


def test_a_heartbeat_never_acks_a_chunk_that_is_still_being_appended(tmp_path, loop):
    """The session's expected offset moves past a chunk before the chunk is appended; a
    heartbeat sent during the append (held by the test until three heartbeats came, 50 ms
    apart) repeats the last Ack the slave sent, never that offset. SYNC_FLUSH: the chunk is
    then applied in the pool while the loop goes on sending heartbeats."""
    data = records(tmp_path, 3)
    master = FakeMaster(len(data))
    store = MessageStore(config(tmp_path / "slave", broker_role="SLAVE",
                                flush_disk_type="SYNC_FLUSH", ha_send_heartbeat_interval=50))
    store.start()
    appending, append_may_go = threading.Event(), threading.Event()
    real_append = store.append_raw

    def held_append(offset: int, raw: bytes) -> None:
        appending.set()
        assert append_may_go.wait(10), "the test never let the append go"
        real_append(offset, raw)

    store.append_raw = held_append
    client = following(tmp_path, store, master, loop)
    try:
        wait_until(master.acks, 10, "the handshake's Ack")
        assert master.acks()[0][1] == 0
        master.outbox.put(chunk(data, len(data)))
        assert appending.wait(10)
        before = len(master.acks())
        wait_until(lambda: len(master.acks()) >= before + 3, 10,
                   "three heartbeats while the chunk is appended")
        assert {off for _, off in master.acks()} == {0}  # nothing past what the slave holds
        append_may_go.set()
        wait_until(lambda: any(off == len(data) for _, off in master.acks()), 10,
                   "the chunk's Ack once it is appended and flushed")
        assert store.max_phy_offset() == store.flushed_offset == len(data)
    finally:
        append_may_go.set()
        client.stop()
        master.stop()
        store.shutdown()
    assert client.connected is False


async def _no_credentials(channel) -> list[tuple[str, str]]:
    return []  # the fake master admits anyone


def following(tmp_path, store: MessageStore, master: FakeMaster,
              loop: asyncio.AbstractEventLoop) -> ReplicationClient:
    """A started client of `master` for `store`, on `loop`."""
    client = ReplicationClient(store, EpochCache(), EpochFile(str(tmp_path / "epochs")),
                               f"127.0.0.1:{master.port}", "s1", "broker-a", SYSTEM_CLOCK,
                               loop, credentials=_no_credentials)
    client.start()
    return client


def test_stop_ends_a_session_waiting_for_the_master_at_once(tmp_path, loop):
    master = FakeMaster(0)
    store = MessageStore(config(tmp_path / "slave", broker_role="SLAVE"))
    store.start()
    client = following(tmp_path, store, master, loop)
    try:
        wait_until(lambda: client.connected, 10, "the session")
        started = time.monotonic()
        client.stop()
        assert time.monotonic() - started < 5.0 and not client.connected  # cancelled, not timed out (10 s)
    finally:
        master.stop()
        store.shutdown()

"""A raw replication client for tests that play the slave by hand: it proves membership, sends
a Hello from an empty log and reads the master's stream; `AckingSlave` acks every chunk while
`acking` is set, on a thread of its own."""
from __future__ import annotations

import threading

import grpc

from proto import replication_pb2 as rpb
from proto import replication_pb2_grpc as rpb_grpc
from tests.support.membership import member_metadata
from tests.support.streams import Outbox

BROKER_NAME = "broker-a"


def open_stream(address: str, node_id: str, secret: str,
                options: tuple[tuple[str, object], ...] = ()):
    """(channel, call, outbox) of a stream whose Hello is sent, on a channel with `options`;
    the caller closes all three."""
    channel = grpc.insecure_channel(address, options=options)
    outbox = Outbox()
    outbox.put(rpb.SlaveMessage(hello=rpb.Hello(node_id=node_id, broker_name=BROKER_NAME,
                                                max_offset=0, min_offset=0)))
    metadata = member_metadata(address, node_id, secret)
    call = rpb_grpc.ReplicationStub(channel).Stream(iter(outbox), metadata=metadata, timeout=120)
    return channel, call, outbox


class AckingSlave:
    """Reads the stream and acks each chunk's end (as received and flushed) while `acking` is
    set; `received` is the end of the last chunk. Use as a context manager."""

    def __init__(self, address: str, node_id: str, secret: str) -> None:
        self.acking = threading.Event()
        self.acking.set()
        self.received = 0
        self._channel, self._call, self._outbox = open_stream(address, node_id, secret)
        self._thread = threading.Thread(target=self._read, name=f"raw-slave-{node_id}",
                                        daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for msg in self._call:
                if msg.HasField("chunk") and msg.chunk.data:
                    self.received = msg.chunk.offset + len(msg.chunk.data)
                if self.acking.is_set() and msg.HasField("chunk"):
                    self._outbox.put(rpb.SlaveMessage(ack=rpb.Ack(
                        max_offset=self.received, flushed_offset=self.received)))
        except grpc.RpcError:
            pass  # the call ended (closed by the test or by the master)

    def __enter__(self) -> "AckingSlave":
        return self

    def __exit__(self, *exc) -> None:
        self._outbox.close()
        self._call.cancel()
        self._thread.join(10)
        self._channel.close()

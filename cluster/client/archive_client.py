"""A client of one archive server's reads (proto/archive.proto): holdings, the message lookups
and Reconsume, with the archive's admin token."""
from __future__ import annotations

from typing import Sequence

from proto import admin_pb2 as admin_pb
from proto import archive_pb2 as pb
from proto import archive_pb2_grpc as pb_grpc

from cluster.security.tls import ClientTls, open_channel


class ArchiveClient:
    """One archive server's reads over one gRPC channel, each call with the bearer token and
    `timeout`. Owns the channel (closed by `close` or the with block); a gRPC channel may be
    shared by threads, so the client takes no lock."""

    def __init__(self, address: str, token: str, tls: ClientTls | None = None,
                 timeout: float = 30.0) -> None:
        self.address = address
        self.timeout = timeout
        self._metadata = [("authorization", f"Bearer {token}")]
        self._channel = open_channel(address, tls, [("grpc.max_receive_message_length",
                                                     256 << 20)])
        self._stub = pb_grpc.ArchiveStub(self._channel)

    def __enter__(self) -> "ArchiveClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def holdings(self, group: str = "") -> pb.Holdings:
        return self._stub.ListHoldings(pb.HoldingsRequest(broker_group=group),
                                       metadata=self._metadata, timeout=self.timeout)

    def query(self, query: admin_pb.QueryMessagesRequest,
              group: str = "") -> admin_pb.GetMessagesResponse:
        return self._stub.QueryMessages(pb.ArchiveQueryRequest(broker_group=group, query=query),
                                        metadata=self._metadata, timeout=self.timeout)

    def reconsume(self, msg_ids: Sequence[str], cluster_address: str, target_topic: str = "",
                  group: str = "") -> pb.ReconsumeResponse:
        return self._stub.Reconsume(pb.ReconsumeRequest(
            broker_group=group, msg_ids=list(msg_ids), target_topic=target_topic,
            cluster_address=cluster_address), metadata=self._metadata, timeout=self.timeout)

"""A client of the controller's operator calls (proto/controller.proto): the groups it knows and
a planned switch of a group's master. Both need the admin bearer token. `tls`: the CA (and
client certificate) of a controller serving TLS; None: plaintext."""
from __future__ import annotations


from proto import controller_pb2 as pb
from proto import controller_pb2_grpc as pb_grpc

from cluster.security.tls import ClientTls, open_channel


class ControllerClient:
    """The controller's operator calls over one gRPC channel, each with the bearer token and
    `timeout`. Owns the channel (closed by `close` or the with block); no lock, as a gRPC
    channel may be shared by threads."""

    def __init__(self, address: str, token: str, timeout: float = 10.0,
                 tls: ClientTls | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._channel = open_channel(address, tls)
        self._stub = pb_grpc.ControllerStub(self._channel)

    def groups(self) -> pb.GroupsView:
        return self._stub.GetGroups(pb.GetGroupsRequest(), timeout=self.timeout,
                                    metadata=self._metadata)

    def switch_master(self, broker_name: str, node_id: str) -> pb.GroupView:
        return self._stub.SwitchMaster(pb.SwitchMasterRequest(broker_name=broker_name,
                                                              node_id=node_id),
                                       timeout=self.timeout, metadata=self._metadata)

    def archives(self) -> pb.ArchiveList:
        return self._stub.ListArchives(pb.ListArchivesRequest(), timeout=self.timeout,
                                       metadata=self._metadata)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "ControllerClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

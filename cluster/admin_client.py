"""A small client of the Admin API, shared by the CLI, the tests and the benchmarks."""
from __future__ import annotations

import grpc

from proto import admin_pb2 as pb
from proto import admin_pb2_grpc as pb_grpc
from slave.replication_client import GRPC_OPTIONS


class AdminClient:
    def __init__(self, address: str, token: str, timeout: float = 30.0) -> None:
        self.address = address
        self.timeout = timeout
        self._channel = grpc.insecure_channel(address, options=GRPC_OPTIONS)
        self._stub = pb_grpc.AdminStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method, request, timeout: float | None = None):
        return method(request, metadata=self._metadata, timeout=timeout or self.timeout)

    def status(self, timeout: float | None = None) -> pb.NodeStatus:
        return self._call(self._stub.GetNodeStatus, pb.NodeStatusRequest(), timeout)

    def switch_role(self, role: str, master_address: str = "", epoch: int = 0) -> pb.NodeStatus:
        return self._call(self._stub.SwitchRole, pb.SwitchRoleRequest(
            role=role, master_address=master_address, epoch=epoch))

    def send(self, messages: list[pb.Message]) -> pb.SendMessagesResponse:
        return self._call(self._stub.SendMessages, pb.SendMessagesRequest(messages=messages))

    def get(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
            tag_expression: str = "") -> pb.GetMessagesResponse:
        return self._call(self._stub.GetMessages, pb.GetMessagesRequest(
            topic=topic, queue_id=queue_id, offset=offset, max_count=max_count,
            tag_expression=tag_expression))

    def query(self, topic: str, key: str, max_count: int = 32) -> pb.GetMessagesResponse:
        return self._call(self._stub.QueryMessages, pb.QueryMessagesRequest(
            topic=topic, key=key, max_count=max_count))

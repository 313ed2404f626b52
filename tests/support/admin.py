"""The Admin API in tests: messages for AdminClient.send, and what a refused call answered."""
from __future__ import annotations

from typing import Callable

import grpc
import pytest

from proto import admin_pb2 as pb


def messages(topic: str, n: int, start: int = 0, queues: int = 4, size: int = 256) -> list[pb.Message]:
    """Messages start..start+n-1 of `topic`, round-robin over `queues` queues: key key-<i>,
    tag tagA/tagB alternating, a `size`-byte body starting msg-<i>-."""
    return [pb.Message(topic=topic, queue_id=(start + i) % queues, keys=f"key-{start + i}",
                       tags="tagA" if (start + i) % 2 else "tagB",
                       body=(f"msg-{start + i}-".encode() + b"x" * size)[:size])
            for i in range(n)]


def code_of(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    """The gRPC code and details of a call that must fail."""
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code(), e.value.details()

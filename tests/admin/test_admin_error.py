"""What the admin modules share, in memory: who is calling (for the log of every change), and
the refusal of a master-only change on another node."""
from __future__ import annotations

import grpc

from cluster.admin.admin_error import OPERATOR_METADATA, caller, invalid, not_master_error
from cluster.config.node_role import NotMaster


class Context:
    """The two things caller() reads of a grpc.ServicerContext."""

    def __init__(self, metadata=()) -> None:
        self.metadata = metadata

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def invocation_metadata(self):
        return self.metadata


def test_the_caller_is_the_peer_and_the_operator_it_names():
    assert caller(Context()) == "ipv4:127.0.0.1:50000"
    assert caller(Context([("authorization", "Bearer x")])) == "ipv4:127.0.0.1:50000"
    assert caller(Context([(OPERATOR_METADATA, "alice")])) == "ipv4:127.0.0.1:50000 (alice)"
    assert caller(Context([(OPERATOR_METADATA, b"bob")])) == "ipv4:127.0.0.1:50000 (bob)"
    assert caller(Context([(OPERATOR_METADATA, "")])) == "ipv4:127.0.0.1:50000"
    long = caller(Context([(OPERATOR_METADATA, "x" * 100)]))
    assert long == f"ipv4:127.0.0.1:50000 ({'x' * 64})"  # no more than 64 characters of it


def test_a_master_only_change_elsewhere_is_a_failed_precondition():
    e = not_master_error("create topic Orders", NotMaster("b:1 is a slave of 10.0.0.1:1", "10.0.0.1:1"))
    assert e.code == grpc.StatusCode.FAILED_PRECONDITION
    assert e.message == "create topic Orders: b:1 is a slave of 10.0.0.1:1; send it to the master"
    unknown = not_master_error("create topic Orders", NotMaster("b:1 is changing role (x)"))
    assert unknown.message == "create topic Orders: b:1 is changing role (x)"
    assert invalid("bad").code == grpc.StatusCode.INVALID_ARGUMENT and str(invalid("bad")) == "bad"

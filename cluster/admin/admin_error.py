"""What the Admin API's plain modules share: the error they raise (a gRPC status code and a
message, turned into the call's status by the servicer), who is calling (for the log of every
change), and the master-only guard.

The modules (topic_admin, group_admin, message_lookup, maintenance, runtime_config) take the
node and plain arguments and never see a gRPC context, so they are tested without a server and
the servicer stays a thin adapter.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from cluster.node.node import Node

OPERATOR_METADATA = "x-operator"  # set by the CLI to the local user; informational, not checked


class AdminError(Exception):
    """A refused admin call: nothing was changed. `code` becomes the call's gRPC status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> AdminError:
    return AdminError(grpc.StatusCode.INVALID_ARGUMENT, message)


def caller(context: grpc.ServicerContext) -> str:
    """`peer` or `peer (operator)`: every caller holds the same token, so the peer address and
    the operator name the CLI sends are what tells calls apart in the log."""
    peer = context.peer()
    for key, value in context.invocation_metadata() or ():
        if key == OPERATOR_METADATA and value:
            name = value if isinstance(value, str) else value.decode("utf-8", "replace")
            return f"{peer} ({name[:64]})"
    return peer


def require_master(node: "Node", what: str) -> None:
    """Writes of topics, groups and offsets happen on the master only: a slave's copy is
    replaced by whatever its master says next, so a change there would be lost."""
    if node.master is not None:
        return
    if node.role == "SLAVE":
        raise AdminError(grpc.StatusCode.FAILED_PRECONDITION,
                         f"{what}: {node.config.node_id} is a slave; send it to the master at "
                         f"{node.master_address or '(unknown)'}")
    raise AdminError(grpc.StatusCode.FAILED_PRECONDITION,
                     f"{what}: {node.config.node_id} is changing role; retry in a moment")

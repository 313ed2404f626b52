"""What the Admin API's plain modules share: the error they raise (a gRPC status code and a
message, turned into the call's status by the servicer), who is calling (for the log of every
change), and the refusal of a master-only change on another node.

The modules (topic_admin, group_admin, message_lookup, maintenance, runtime_config) take the
AdminNode and plain arguments and never see a gRPC context, so they are tested without a server and
the servicer stays a thin adapter.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from cluster.config.node_role import NotMaster

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


def not_master_error(what: str, e: "NotMaster") -> AdminError:
    """The refusal of a change that only the master may make (see AdminNode.require_master)."""
    where = "; send it to the master" if e.master_address else ""
    return AdminError(grpc.StatusCode.FAILED_PRECONDITION, f"{what}: {e.reason}{where}")

"""Typed errors of the client: every failure carries a v2 status code (apache.rocketmq.v2.Code).

- `ClientError(code, message)`: the server answered with a status other than OK. Nothing was
  written (a refusal), unless it is a `NotDurableError`.
- `NotDurableError`: a send that the server STORED but whose durability step timed out or
  failed (MASTER_PERSISTENCE_TIMEOUT, SLAVE_PERSISTENCE_TIMEOUT, HA_NOT_AVAILABLE with entries,
  ...). It carries the receipts (message ids, offsets), because the message exists: resending it
  would store a second copy. RocketMQ's own clients retry these; this one never does.
- `ReceiveAfterAckError`: SimpleConsumer.ack_and_receive acked, then its receive failed; it
  carries the acks' results.
- `TransportError`: the call did not produce an answer (deadline passed, connection refused or
  lost). Its outcome is unknown: a send may or may not have been stored. The code is
  REQUEST_TIMEOUT for a passed deadline and CODE_UNSPECIFIED otherwise; `grpc_code` says what
  gRPC reported.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import grpc

from proto.apache.rocketmq.v2 import definition_pb2 as d

if TYPE_CHECKING:
    from cluster.client.message import SendReceipt


def code_name(code: int) -> str:
    """The enum name of a v2 code ("ILLEGAL_TOPIC"), or the number for codes unknown here."""
    try:
        return d.Code.Name(code)
    except ValueError:
        return str(code)


class ClientError(Exception):
    """A v2 status other than OK (or a call without an answer, see TransportError)."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(f"{code_name(code)} ({code}): {message}" if message else code_name(code))
        self.code = code
        self.message = message

    @property
    def code_name(self) -> str:
        return code_name(self.code)

    @classmethod
    def from_status(cls, status: d.Status, what: str = "") -> "ClientError":
        message = status.message
        if what:
            message = f"{what}: {message}" if message else what
        return cls(status.code, message)


class NotDurableError(ClientError):
    """Stored, but not acknowledged as durable in time: never resend these messages."""

    def __init__(self, code: int, message: str, receipts: Sequence["SendReceipt"]) -> None:
        super().__init__(code, message)
        self.receipts = tuple(receipts)


class ReceiveAfterAckError(ClientError):
    """SimpleConsumer.ack_and_receive: the receive failed, the acks before it were answered;
    `ack_results` has each ack's result (None: acked), as ack_many."""

    def __init__(self, code: int, message: str,
                 ack_results: Sequence["ClientError | None"]) -> None:
        super().__init__(code, message)
        self.ack_results = list(ack_results)


class TransportError(ClientError):
    """No answer from the server; the outcome of the call is unknown."""

    def __init__(self, message: str, grpc_code: grpc.StatusCode | None) -> None:
        code = d.REQUEST_TIMEOUT if grpc_code is grpc.StatusCode.DEADLINE_EXCEEDED \
            else d.CODE_UNSPECIFIED
        super().__init__(code, message)
        self.grpc_code = grpc_code

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError, method: str, target: str) -> "TransportError":
        grpc_code = error.code() if hasattr(error, "code") else None
        details = error.details() if hasattr(error, "details") else str(error)
        name = grpc_code.name if grpc_code is not None else "?"
        return cls(f"{method} to {target} failed: {name} {details}", grpc_code)


def check(status: d.Status, what: str = "", ok: Sequence[int] = (d.OK,)) -> None:
    """Raise ClientError unless the status code is one of `ok`."""
    if status.code not in ok:
        raise ClientError.from_status(status, what)

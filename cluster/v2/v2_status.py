"""v2 statuses: the error a refused request raises, the store's put outcomes as v2 codes, and
the Role's refusals (NotMaster) as v2 errors.

Every module of the client API raises `V2Error(code, message)` for a request it refuses (nothing
was written); the servicer turns it into the response's `status`. A store put that did not
reach PUT_OK maps onto the v2 code the official clients act on:

    PutStatus                          v2 Code
    PUT_OK                             OK
    FLUSH_DISK_TIMEOUT                 MASTER_PERSISTENCE_TIMEOUT   (stored, not yet on disk)
    FLUSH_SLAVE_TIMEOUT                SLAVE_PERSISTENCE_TIMEOUT    (stored, not on the slaves)
    SLAVE_NOT_AVAILABLE, IN_SYNC_REPLICAS_NOT_ENOUGH   HA_NOT_AVAILABLE
    OS_PAGE_CACHE_BUSY                 TOO_MANY_REQUESTS
    PROPERTIES_SIZE_EXCEEDED           MESSAGE_PROPERTIES_TOO_LARGE
    MESSAGE_ILLEGAL                    the field's code (ILLEGAL_TOPIC, ..., ILLEGAL_MESSAGE_ID
                                       for an id reused within the duplicate window) from the
                                       reason
    anything else                      INTERNAL_SERVER_ERROR
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from proto.apache.rocketmq.v2 import definition_pb2 as d
from store.put_result import PutResult, PutStatus

from cluster.config.node_role import NotMaster

if TYPE_CHECKING:
    from master.master_role import MasterRole

    from cluster.config.node_role import Forward, Role


# What a put was for, as its refusal names it ("<what> failed, status ...").
SEND_MESSAGE = "send message"
RECORDING_CONSUMER_STATE = "recording the consumer state"
RECORDING_TOPIC = "recording the topic"
RECORDING_TRANSACTION = "recording the transaction"


class V2Error(Exception):
    """A request refused with a v2 status code; nothing was written."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def from_put(cls, result: PutResult, what: str = SEND_MESSAGE) -> "V2Error":
        """The refusal of a put that did not reach PUT_OK; `what` names what the put was for."""
        return cls(put_status_code(result), put_status_message(result, what))

    def status(self) -> d.Status:
        return d.Status(code=self.code, message=self.message)


def status(code: int, message: str = "") -> d.Status:
    return d.Status(code=code, message=message or d.Code.Name(code))


def not_implemented(what: str) -> d.Status:
    return d.Status(code=d.NOT_IMPLEMENTED, message=f"{what} is not implemented yet by this server")




PUT_STATUS_CODES: dict[PutStatus, int] = {
    PutStatus.PUT_OK: d.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: d.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: d.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: d.HA_NOT_AVAILABLE,
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: d.HA_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: d.INTERNAL_SERVER_ERROR,
    PutStatus.FLUSH_DISK_FAILED: d.INTERNAL_SERVER_ERROR,
    PutStatus.CREATE_MAPPED_FILE_FAILED: d.INTERNAL_SERVER_ERROR,
    PutStatus.UNKNOWN_ERROR: d.INTERNAL_SERVER_ERROR,
    PutStatus.OS_PAGE_CACHE_BUSY: d.TOO_MANY_REQUESTS,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: d.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.MESSAGE_ILLEGAL: d.BAD_REQUEST,  # refined from the reason below
}
# MessageIllegal("<field>", ...) reasons start with "illegal <field>".
_ILLEGAL_FIELD_CODES = (("illegal topic", d.ILLEGAL_TOPIC), ("illegal tag", d.ILLEGAL_MESSAGE_TAG),
                        ("illegal property", d.ILLEGAL_MESSAGE_PROPERTY_KEY),
                        ("illegal delivery time", d.ILLEGAL_DELIVERY_TIME),
                        ("illegal body", d.MESSAGE_BODY_TOO_LARGE),
                        # an id reused for another message within the duplicate window
                        ("illegal message id", d.ILLEGAL_MESSAGE_ID))


def put_status_code(result: PutResult) -> int:
    if result.status is PutStatus.MESSAGE_ILLEGAL:
        for prefix, code in _ILLEGAL_FIELD_CODES:
            if result.reason.startswith(prefix):
                return code
    return PUT_STATUS_CODES.get(result.status, d.INTERNAL_SERVER_ERROR)


def put_status_message(result: PutResult, what: str = SEND_MESSAGE) -> str:
    """The status message of a put's outcome, naming what the put was for: a client's send,
    or a record the node writes for it (the consumer state, a topic, a transaction's end)."""
    if result.status is PutStatus.PUT_OK:
        return "OK"
    text = f"{what} failed, status {result.status.value}"
    if result.status.stored:
        text = f"stored, but {result.status.value}"
    return f"{text}: {result.reason}" if result.reason else text


def put_status(result: PutResult, what: str = SEND_MESSAGE) -> d.Status:
    """The v2 status of a put's outcome (OK for PUT_OK)."""
    return d.Status(code=put_status_code(result), message=put_status_message(result, what))


def v2_route(role: "Role", *, forwarded: bool) -> "MasterRole | Forward":
    """Role.route with the refusal as a V2Error (INTERNAL_SERVER_ERROR: clients retry)."""
    try:
        return role.route(forwarded=forwarded)
    except NotMaster as e:
        raise V2Error(d.INTERNAL_SERVER_ERROR, e.reason) from None


def v2_require_master(role: "Role", what: str) -> "MasterRole":
    """Role.require_master with the refusal as a V2Error saying that `what` lives on the
    master."""
    try:
        return role.require_master()
    except NotMaster as e:
        where = e.master_address or "unknown"
        raise V2Error(d.INTERNAL_SERVER_ERROR,
                      f"{e.reason}: {what} live on the master ({where})") from None

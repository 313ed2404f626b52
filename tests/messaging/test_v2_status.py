"""v2 statuses in memory: the store's put outcomes as v2 codes and messages, V2Error, and the
Role's answers (answer here, forward, refuse) as v2 errors (v2_route, v2_require_master)."""
from __future__ import annotations

import pytest

from cluster.v2 import v2_status
from cluster.v2.v2_status import V2Error, v2_require_master, v2_route
from cluster.config.node_role import Follower, Forward, Leader, Role, Transitioning
from proto.apache.rocketmq.v2 import definition_pb2 as d
from store.broker_role import BrokerRole
from store.put_result import PutResult, PutStatus

MASTER = object()  # stands in for the MasterRole a Leader carries
MASTER_ADDRESS = "10.0.0.1:10911"


# -- PutStatus -> code ----------------------------------------------------------------------------
EXPECTED_CODES = {
    PutStatus.PUT_OK: d.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: d.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: d.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: d.HA_NOT_AVAILABLE,
    PutStatus.SLAVE_NOT_AVAILABLE: d.HA_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: d.INTERNAL_SERVER_ERROR,
    PutStatus.FLUSH_DISK_FAILED: d.INTERNAL_SERVER_ERROR,
    PutStatus.CREATE_MAPPED_FILE_FAILED: d.INTERNAL_SERVER_ERROR,
    PutStatus.UNKNOWN_ERROR: d.INTERNAL_SERVER_ERROR,
    PutStatus.OS_PAGE_CACHE_BUSY: d.TOO_MANY_REQUESTS,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: d.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.MESSAGE_ILLEGAL: d.BAD_REQUEST,
}


@pytest.mark.parametrize("status", list(PutStatus), ids=[s.value for s in PutStatus])
def test_every_put_status_has_its_code(status):
    result = PutResult(status, reason="disk said no")
    assert v2_status.put_status_code(result) == EXPECTED_CODES[status]
    message = v2_status.put_status_message(result)
    assert status is PutStatus.PUT_OK or ("disk said no" in message and status.value in message)


def test_store_refusal_reasons_refine_message_illegal():
    r = PutResult(PutStatus.MESSAGE_ILLEGAL, reason="illegal delivery time: too far")
    assert v2_status.put_status_code(r) == d.ILLEGAL_DELIVERY_TIME
    r = PutResult(PutStatus.MESSAGE_ILLEGAL, reason="illegal topic: reserved")
    assert v2_status.put_status_code(r) == d.ILLEGAL_TOPIC


def test_a_refused_put_as_an_error_and_a_status():
    stored = V2Error.from_put(PutResult(PutStatus.FLUSH_SLAVE_TIMEOUT, reason="slave 1 late"))
    assert stored.code == d.SLAVE_PERSISTENCE_TIMEOUT
    assert stored.message == "stored, but FLUSH_SLAVE_TIMEOUT: slave 1 late"
    assert stored.status() == d.Status(code=d.SLAVE_PERSISTENCE_TIMEOUT, message=stored.message)
    refused = V2Error.from_put(PutResult(PutStatus.OS_PAGE_CACHE_BUSY))
    assert (refused.code, refused.message) == (d.TOO_MANY_REQUESTS,
                                               "send message failed, status OS_PAGE_CACHE_BUSY")
    assert v2_status.put_status(PutResult(PutStatus.PUT_OK)) == d.Status(code=d.OK, message="OK")
    # a record the node writes for a client names what it was for, not a send
    state = V2Error.from_put(PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason="DISK_FULL"),
                             v2_status.RECORDING_CONSUMER_STATE)
    assert (state.code, state.message) == (
        d.INTERNAL_SERVER_ERROR,
        "recording the consumer state failed, status SERVICE_NOT_AVAILABLE: DISK_FULL")
    topic = v2_status.put_status(PutResult(PutStatus.FLUSH_DISK_FAILED), v2_status.RECORDING_TOPIC)
    assert topic.message == "recording the topic failed, status FLUSH_DISK_FAILED"
    assert v2_status.status(d.FORBIDDEN) == d.Status(code=d.FORBIDDEN, message="FORBIDDEN")
    assert v2_status.not_implemented("RecallMessage").code == d.NOT_IMPLEMENTED


# -- the Role's answers as v2 errors --------------------------------------------------------------
def roles() -> tuple[Role, Role, Role]:
    return (Role("b:0", Leader(BrokerRole.SYNC_MASTER, 3, MASTER)),
            Role("b:1", Follower(MASTER_ADDRESS)),
            Role("b:2", Transitioning("switching to SLAVE")))


def test_v2_route_answers_here_forwards_once_or_refuses_with_a_retryable_code():
    leader, follower, transitioning = roles()
    assert v2_route(leader, forwarded=False) is MASTER
    assert v2_route(leader, forwarded=True) is MASTER  # a forwarded call is answered by a master
    assert v2_route(follower, forwarded=False) == Forward(MASTER_ADDRESS)
    with pytest.raises(V2Error) as e:
        v2_route(follower, forwarded=True)  # never forwarded twice
    assert e.value.code == d.INTERNAL_SERVER_ERROR
    assert e.value.message.startswith(f"b:1 is a slave of {MASTER_ADDRESS}")
    assert "never forwarded again" in e.value.message
    with pytest.raises(V2Error) as e:
        v2_route(transitioning, forwarded=False)
    assert e.value.code == d.INTERNAL_SERVER_ERROR
    assert e.value.message == "b:2 is changing role (switching to SLAVE); retry in a moment"


def test_v2_require_master_says_what_lives_on_the_master_and_where():
    leader, follower, transitioning = roles()
    assert v2_require_master(leader, "consumer offsets") is MASTER
    with pytest.raises(V2Error) as e:
        v2_require_master(follower, "consumer offsets")
    assert (e.value.code, e.value.message) == (
        d.INTERNAL_SERVER_ERROR,
        f"b:1 is a slave of {MASTER_ADDRESS}: consumer offsets live on the master ({MASTER_ADDRESS})")
    with pytest.raises(V2Error) as e:
        v2_require_master(transitioning, "transactions")
    assert e.value.message.endswith("transactions live on the master (unknown)")

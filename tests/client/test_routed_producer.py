"""RoutedProducer's decisions (SendPlan, the writable queues of a route, which failures move a
send to another group) as plain objects; tests/drills/test_group_drills.py sends through
a two-group cluster."""
from __future__ import annotations

import grpc
import pytest

from proto.apache.rocketmq.v2 import definition_pb2 as d

from cluster.client.client_errors import ClientError, NotDurableError, TransportError
from cluster.client.routed_producer import (RoutedQueue, SendPlan, moves_to_another_group,
                                            writable_queues)


def _queue(broker: str, qid: int, perm: int = d.READ_WRITE, broker_id: int = 0,
           port: int = 1) -> d.MessageQueue:
    q = d.MessageQueue(id=qid, permission=perm)
    q.broker.name, q.broker.id = broker, broker_id
    q.broker.endpoints.addresses.add(host="127.0.0.1", port=port + 1)
    q.broker.endpoints.addresses.add(host="127.0.0.1", port=port)
    return q


def test_writable_queues_keep_route_order_and_sort_endpoints() -> None:
    route = [_queue("broker-a", 0), _queue("broker-b", 0, port=5), _queue("broker-a", 1),
             _queue("broker-b", 1, perm=d.READ, port=5), _queue("broker-a", 2, broker_id=1)]
    assert writable_queues(route) == [
        RoutedQueue("broker-a", 0, "127.0.0.1:1;127.0.0.1:2"),
        RoutedQueue("broker-b", 0, "127.0.0.1:5;127.0.0.1:6"),
        RoutedQueue("broker-a", 1, "127.0.0.1:1;127.0.0.1:2")]


QUEUES = [RoutedQueue("broker-a", 0, "a"), RoutedQueue("broker-b", 0, "b"),
          RoutedQueue("broker-a", 1, "a"), RoutedQueue("broker-b", 1, "b")]


def test_round_robin_and_the_next_group_after_a_refusal() -> None:
    plan = SendPlan()
    assert [plan.first(QUEUES, None) for _ in range(5)] == [0, 1, 2, 3, 0]
    assert plan.next_after(QUEUES, 2, ["broker-a"]) == 3
    assert plan.next_after(QUEUES, 3, ["broker-b"]) == 0
    assert plan.next_after(QUEUES, 0, ["broker-a", "broker-b"]) is None


def test_a_message_group_keeps_its_queue() -> None:
    plan = SendPlan()
    first = plan.first(QUEUES, "orders-7")
    assert all(plan.first(QUEUES, "orders-7") == first for _ in range(3))


def test_only_refusals_that_stored_nothing_move() -> None:
    assert moves_to_another_group(ClientError(d.INTERNAL_SERVER_ERROR, "no master"))
    assert not moves_to_another_group(NotDurableError(d.SLAVE_PERSISTENCE_TIMEOUT, "", ()))
    assert not moves_to_another_group(TransportError("lost", grpc.StatusCode.UNAVAILABLE))
    # bad input is refused by every group; an id reused with another body must not be
    # stored by a group whose window does not know the original
    assert not moves_to_another_group(ClientError(d.ILLEGAL_MESSAGE_ID, "reused"))
    assert not moves_to_another_group(ClientError(d.MESSAGE_BODY_TOO_LARGE, "too large"))


def test_bad_attempts() -> None:
    with pytest.raises(ValueError):
        SendPlan(0)

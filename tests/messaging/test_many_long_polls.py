"""Hundreds of ReceiveMessage long polls held at once by one node (the asyncio serving layer):
every call waits (none is answered early, where the threaded server answered all past its 40th
at once), and a send of as many messages wakes them, each message delivered once."""
from __future__ import annotations

import pytest

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from tests.support.v2 import G, duration, mq, send
from tests.support.waiting import wait_until

POLLS = 300  # well past the 40 long polls a pool thread could hold


@pytest.fixture
def master(nodes, clock):
    node = nodes.start(min_invisible_time_ms=500, clock=clock)
    return node, nodes.stub(node)


def test_hundreds_of_long_polls_are_held_then_each_gets_a_message(master, clock):
    node, stub = master
    send(stub, "T", [b"first"])  # the topic exists; one poller takes this one at once
    request = s.ReceiveMessageRequest(
        group=G, message_queue=mq("T", 0), batch_size=1,
        filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
        invisible_duration=duration(30), long_polling_timeout=duration(20))
    calls = [stub.ReceiveMessage(request, timeout=60) for _ in range(POLLS)]
    # all but the one that took "first" wait on the node's clock: held, not answered
    wait_until(lambda: clock.waiters == POLLS - 1, 30, f"{POLLS - 1} long polls waiting")
    assert node.messaging.consumer_router.calls.budget.open == POLLS - 1
    send(stub, "T", [b"m%d" % i for i in range(POLLS - 1)])
    bodies = []
    for call in calls:
        answer = list(call)
        assert answer[0].status.code == d.OK, answer[0].status
        bodies += [r.message.body for r in answer if r.WhichOneof("content") == "message"]
    assert sorted(bodies) == sorted([b"first"] + [b"m%d" % i for i in range(POLLS - 1)])
    assert node.messaging.consumer_router.calls.budget.open == 0 and clock.waiters == 0

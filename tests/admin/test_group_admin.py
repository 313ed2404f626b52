"""Admin consumer group calls on real in-process nodes, over the master's consumer state
(node.messaging.consumers): create/update/list/delete, progress with lag per queue, offset
reset by offset and by time; the state's refusals map to gRPC codes and a slave refuses, naming
its master."""
from __future__ import annotations

import grpc
import pytest

from cluster.admin.group_admin import grpc_code
from proto.apache.rocketmq.v2 import definition_pb2 as d
from tests.support.admin import code_of, messages
from tests.support.nodes import settle

TOPIC = "GroupTopic"


@pytest.fixture(scope="module")
def cluster(pair):
    master, m, s, clock = pair.master, pair.m, pair.s, pair.clock
    m.create_topic(TOPIC, queue_nums=2)
    assert m.send(messages(TOPIC, 10, queues=2)).status == "PUT_OK"  # 5 per queue
    clock.advance(0.02)
    middle = clock.now_ms()
    clock.advance(0.02)
    assert m.send(messages(TOPIC, 4, start=10, queues=2)).status == "PUT_OK"  # 7 each
    settle(master)
    return master, m, s, middle


def test_group_lifecycle_progress_and_reset(cluster):
    _, m, _, middle = cluster
    g = m.upsert_group("Billing", retry_max_times=3)
    assert (g.name, g.fifo, g.retry_max_times, g.consume_enable) == ("Billing", False, 3, True)
    g = m.upsert_group("Billing", fifo=True)  # only the fields set change
    assert (g.fifo, g.retry_max_times) == (True, 3)
    assert "Billing" in {x.name for x in m.list_groups().groups}
    assert m.consumer_progress("Billing").queues == []  # nothing consumed yet

    moved = m.reset_offset("Billing", TOPIC, offset=2)
    assert [(o.queue_id, o.offset) for o in moved.offsets] == [(0, 2), (1, 2)]
    p = m.consumer_progress("Billing")
    assert [(q.topic, q.queue_id, q.committed_offset, q.max_offset, q.lag, q.inflight)
            for q in p.queues] == [(TOPIC, 0, 2, 7, 5, 0), (TOPIC, 1, 2, 7, 5, 0)]
    assert (p.total_lag, p.total_inflight) == (10, 0)

    one = m.reset_offset("Billing", TOPIC, queue_id=1, offset=99)  # clamped to the end
    assert [(o.queue_id, o.offset) for o in one.offsets] == [(1, 7)]
    by_time = m.reset_offset("Billing", TOPIC, timestamp_ms=middle)
    assert [(o.queue_id, o.offset) for o in by_time.offsets] == [(0, 5), (1, 5)]
    assert m.consumer_progress("Billing").total_lag == 4

    assert m.delete_group("Billing").deleted
    assert "Billing" not in {x.name for x in m.list_groups().groups}
    assert code_of(lambda: m.delete_group("Billing"))[0] == grpc.StatusCode.NOT_FOUND


def test_refusals_map_to_grpc_codes(cluster):
    _, m, _, _ = cluster
    m.upsert_group("Checked")
    cases = [
        (lambda: m.consumer_progress("Unknown"), grpc.StatusCode.NOT_FOUND, "Unknown"),
        (lambda: m.reset_offset("Checked", "NoTopic", offset=0), grpc.StatusCode.NOT_FOUND, "NoTopic"),
        (lambda: m.reset_offset("Unknown", TOPIC, offset=0), grpc.StatusCode.NOT_FOUND, "Unknown"),
        (lambda: m.reset_offset("Checked", TOPIC, queue_id=5, offset=0),
         grpc.StatusCode.INVALID_ARGUMENT, "queue 5"),
        (lambda: m.reset_offset("Checked", TOPIC, offset=-1), grpc.StatusCode.INVALID_ARGUMENT, "-1"),
        (lambda: m.reset_offset("Checked", TOPIC), grpc.StatusCode.INVALID_ARGUMENT, "offset"),
        (lambda: m.reset_offset("Checked", ""), grpc.StatusCode.INVALID_ARGUMENT, "topic"),
        (lambda: m.upsert_group("Checked", retry_max_times=5000), grpc.StatusCode.INVALID_ARGUMENT,
         "5000"),
        (lambda: m.upsert_group(""), grpc.StatusCode.INVALID_ARGUMENT, "empty"),
        (lambda: m.upsert_group("bad group!"), grpc.StatusCode.INVALID_ARGUMENT, ""),
    ]
    for call, code, text in cases:
        got, details = code_of(call)
        assert got == code and text in details, (got, details)
    assert m.consumer_progress("Checked").queues == []  # the refused resets changed nothing
    assert [g.retry_max_times for g in m.list_groups().groups if g.name == "Checked"] == [16]


def test_v2_codes():
    assert grpc_code(d.ILLEGAL_CONSUMER_GROUP) == grpc.StatusCode.INVALID_ARGUMENT
    assert grpc_code(d.BAD_REQUEST) == grpc.StatusCode.INVALID_ARGUMENT
    assert grpc_code(d.TOPIC_NOT_FOUND) == grpc.StatusCode.NOT_FOUND
    assert grpc_code(d.INTERNAL_SERVER_ERROR) == grpc.StatusCode.FAILED_PRECONDITION
    assert grpc_code(123456) == grpc.StatusCode.FAILED_PRECONDITION


def test_a_slave_sends_group_calls_to_its_master(cluster):
    master, _, s, _ = cluster
    for call in (s.list_groups, lambda: s.upsert_group("OnSlave"),
                 lambda: s.consumer_progress("OnSlave"), lambda: s.delete_group("OnSlave"),
                 lambda: s.reset_offset("OnSlave", TOPIC, offset=0)):
        code, details = code_of(call)
        assert code == grpc.StatusCode.FAILED_PRECONDITION and master.address in details, details

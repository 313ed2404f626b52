"""Receive / ack / invisibility / DLQ / FIFO / offsets over gRPC against in-process nodes, and the
consumer state surviving a restart and a failover (it is replayed from the commitlog).

The nodes run by a ManualClock (the `clock` fixture): invisibility ends when a test advances
the clock, never by waiting. Receives ask what is there now (no long poll) after settle();
a test that checks a long poll starts it in the background and advances the clock once it
waits. The failover test keeps the real clock: its slave replicates by it."""
from __future__ import annotations

import json
import time

import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from cluster.consume.records import STATE_TOPIC
from store import running_flags as rf
from tests.support.nodes import settle
from tests.support.v2 import G, ack, bodies, mq, receive, send
from tests.support.waiting import in_background, waiting_on

def state_records(node) -> int:
    return node.store.max_phy_offset()


@pytest.fixture
def master(nodes, clock):
    node = nodes.start(min_invisible_time_ms=500, clock=clock)
    return node, nodes.stub(node)


def test_receive_ack_and_tag_filter(master):
    node, stub = master
    send(stub, "T", [b"a1", b"a2"], tag="a")
    send(stub, "T", [b"b1"], tag="b")
    settle(node)
    st, got = receive(stub, tags="a", invisible=30)
    assert st.code == d.OK and bodies(got) == [b"a1", b"a2"]
    m = got[0]
    assert m.system_properties.delivery_attempt == 1
    assert m.system_properties.invisible_duration.seconds == 30
    assert m.system_properties.body_digest.checksum
    assert receive(stub, tags="a")[0].code == d.MESSAGE_NOT_FOUND  # in flight: invisible
    r = ack(stub, got)
    assert r.status.code == d.OK and all(e.status.code == d.OK for e in r.entries)
    again = ack(stub, got[:1])  # acked already
    assert again.status.code == d.INVALID_RECEIPT_HANDLE
    # another group sees everything, from the start of the queues
    st, other = receive(stub, group=d.Resource(name="G2"))
    assert bodies(other) == [b"a1", b"a2", b"b1"]
    progress = {p.queue_id: p for p in node.messaging.consumers.progress("G")}
    assert sum(p.inflight for p in progress.values()) == 0


def test_redelivery_after_invisibility_with_attempt_two(master, clock):
    node, stub = master
    send(stub, "T", [b"x"])
    settle(node)
    _, first = receive(stub, invisible=0.5)
    assert [m.system_properties.delivery_attempt for m in first] == [1]
    clock.advance(0.4)
    assert receive(stub)[0].code == d.MESSAGE_NOT_FOUND  # still invisible for 0.1 s
    # a long poll of 3 s (by the clock) is woken by the expiry, not by the poll's end; the
    # call's deadline (30 real seconds) is far off, and settle() leaves no dispatch to come
    # (a dispatch would wake the poll too)
    settle(node)
    poll = in_background(lambda: receive(stub, invisible=5, wait=3, timeout=30))
    waiting_on(clock)
    clock.advance(0.1)
    st, again = poll.result(timeout=10)
    assert st.code == d.OK
    assert again[0].body == b"x" and again[0].system_properties.delivery_attempt == 2
    assert again[0].system_properties.message_id == first[0].system_properties.message_id
    assert ack(stub, first).status.code == d.INVALID_RECEIPT_HANDLE  # the old delivery's handle
    assert ack(stub, again).status.code == d.OK


def test_a_receive_that_finds_nothing_writes_nothing(master):
    """A receive (and every re-attempt of its long poll) that hands out nothing appends no
    state record: an empty pop would wake the poll again by its own dispatch and spin."""
    node, stub = master
    send(stub, "T", [b"x"])
    settle(node)
    _, got = receive(stub, invisible=30)
    assert ack(stub, got).status.code == d.OK
    settle(node)
    before = node.store.max_phy_offset()
    assert receive(stub)[0].code == d.MESSAGE_NOT_FOUND
    assert node.store.max_phy_offset() == before


def test_a_receive_that_cannot_record_its_deliveries_says_so_and_hands_out_nothing(master):
    """The pop record is a write: on a store that stopped taking writes the receive fails with
    a retryable status naming the consumer state (not "send message"), and nothing is in
    flight, so the message is there for the next receive once the store writes again."""
    node, stub = master
    send(stub, "T", [b"x"])
    settle(node)
    before = node.store.max_phy_offset()
    node.store.flags.set(rf.CREATE_FILE_FAILED, "the next commitlog file could not be created")
    st, got = receive(stub, invisible=30)
    assert st.code == d.INTERNAL_SERVER_ERROR and not got
    assert st.message.startswith("recording the consumer state failed, status "
                                 "SERVICE_NOT_AVAILABLE"), st.message
    assert "CREATE_FILE_FAILED" in st.message
    assert node.store.max_phy_offset() == before
    node.store.flags.clear(rf.CREATE_FILE_FAILED)
    st, got = receive(stub, invisible=30)
    assert st.code == d.OK and bodies(got) == [b"x"]
    assert got[0].system_properties.delivery_attempt == 1


def test_change_invisible_duration_issues_a_new_handle(master, clock):
    node, stub = master
    send(stub, "T", [b"x"])
    settle(node)
    _, got = receive(stub, invisible=0.5)
    old = got[0].system_properties.receipt_handle
    r = stub.ChangeInvisibleDuration(s.ChangeInvisibleDurationRequest(
        group=G, topic=d.Resource(name="T"), receipt_handle=old,
        invisible_duration=Duration(seconds=30), message_id=got[0].system_properties.message_id))
    assert r.status.code == d.OK and r.receipt_handle != old
    clock.advance(0.7)  # past the first invisibility
    assert receive(stub)[0].code == d.MESSAGE_NOT_FOUND  # still invisible: 30 s now
    bad = stub.ChangeInvisibleDuration(s.ChangeInvisibleDurationRequest(
        group=G, topic=d.Resource(name="T"), receipt_handle=old, invisible_duration=Duration(seconds=30)))
    assert bad.status.code == d.INVALID_RECEIPT_HANDLE
    got[0].system_properties.receipt_handle = r.receipt_handle
    assert ack(stub, got).status.code == d.OK


def test_dead_letter_queue_after_max_attempts(master, clock):
    node, stub = master
    node.messaging.consumers.upsert_group("G", retry_max_times=1)  # 2 deliveries
    send(stub, "T", [b"poison"], keys=["k1"])
    settle(node)
    _, first = receive(stub, invisible=0.5)
    clock.advance(0.5)
    _, second = receive(stub, invisible=0.5)
    assert second[0].system_properties.delivery_attempt == 2
    clock.advance(0.5)
    st, third = receive(stub, invisible=0.5)
    assert st.code == d.MESSAGE_NOT_FOUND and not third
    settle(node)  # the dead letter that receive wrote
    st, dlq = receive(stub, topic="%DLQ%G", group=d.Resource(name="ops"))
    assert [m.body for m in dlq] == [b"poison"]
    stored = node.store.get_messages("%DLQ%G", 0, 0).messages[0]
    assert stored.properties["DLQ_ORIGIN_TOPIC"] == "T" and stored.reconsume_times == 2
    assert dlq[0].system_properties.message_id == first[0].system_properties.message_id
    assert node.messaging.consumers.progress("G")[0].committed_offset == 1


def test_forward_to_dead_letter_queue_call(master):
    node, stub = master
    send(stub, "T", [b"bad"])
    settle(node)
    _, got = receive(stub, invisible=30)
    r = stub.ForwardMessageToDeadLetterQueue(s.ForwardMessageToDeadLetterQueueRequest(
        group=G, topic=d.Resource(name="T"), receipt_handle=got[0].system_properties.receipt_handle,
        message_id=got[0].system_properties.message_id, delivery_attempt=1, max_delivery_attempts=16))
    assert r.status.code == d.OK
    assert ack(stub, got).status.code == d.INVALID_RECEIPT_HANDLE  # done already
    settle(node)
    assert [m.body for m in receive(stub, topic="%DLQ%G", group=d.Resource(name="ops"))[1]] == [b"bad"]


def test_fifo_group_has_one_message_in_flight_per_message_group(master):
    node, stub = master
    node.messaging.consumers.upsert_group("G", fifo=True)
    send(stub, "F", [b"A1", b"A2"], message_group="A")
    send(stub, "F", [b"B1", b"B2"], message_group="B")
    settle(node)
    got = []
    for qid in range(4):
        got += receive(stub, topic="F", invisible=30, qid=qid)[1]
    assert bodies(got) == [b"A1", b"B1"]
    assert ack(stub, [m for m in got if m.body == b"A1"], topic="F").status.code == d.OK
    st, nxt = receive(stub, topic="F", invisible=30,
                      qid=next(m.system_properties.queue_id for m in got if m.body == b"A1"))
    assert [m.body for m in nxt] == [b"A2"]


def test_offsets_for_pull_consumers(master):
    _, stub = master
    send(stub, "T", [b"1", b"2", b"3"])
    settle(master[0])
    req = s.GetOffsetRequest(group=G, message_queue=mq())
    assert stub.GetOffset(req).status.code == d.OFFSET_NOT_FOUND
    assert stub.UpdateOffset(s.UpdateOffsetRequest(group=G, message_queue=mq(), offset=2)).status.code == d.OK
    r = stub.GetOffset(req)
    assert r.status.code == d.OK and r.offset == 2
    assert [m.body for m in receive(stub)[1]] == [b"3"]  # receive resumes at the committed offset
    bad = stub.UpdateOffset(s.UpdateOffsetRequest(group=G, message_queue=mq(), offset=-1))
    assert bad.status.code == d.ILLEGAL_OFFSET
    beyond = stub.UpdateOffset(s.UpdateOffsetRequest(group=G, message_queue=mq(), offset=99))
    assert beyond.status.code == d.ILLEGAL_OFFSET
    assert stub.UpdateOffset(s.UpdateOffsetRequest(group=G, message_queue=mq("T", 77), offset=0)
                             ).status.code == d.BAD_REQUEST


@pytest.mark.parametrize("change, code", [
    (dict(group=d.Resource(name="")), d.ILLEGAL_CONSUMER_GROUP),
    (dict(group=d.Resource(name="bad group")), d.ILLEGAL_CONSUMER_GROUP),
    (dict(topic="Nope"), d.TOPIC_NOT_FOUND),
    (dict(topic="bad topic"), d.ILLEGAL_TOPIC),
    (dict(tags="||"), d.ILLEGAL_FILTER_EXPRESSION),
    (dict(invisible=0.1), d.ILLEGAL_INVISIBLE_TIME),
    (dict(invisible=50000), d.ILLEGAL_INVISIBLE_TIME),
    (dict(wait=60), d.ILLEGAL_POLLING_TIME),
    (dict(n=0), d.BAD_REQUEST),
])
def test_illegal_receive_requests_change_nothing(master, change, code):
    node, stub = master
    send(stub, "T", [b"x"])
    before = state_records(node)
    st, got = receive(stub, **change)
    assert st.code == code and not got
    assert state_records(node) == before


@pytest.mark.parametrize("handle", ["", "garbage", "R1:0:0:1:00000000", "R1:0:0:x:00000000",
                                    "R1:" + "9" * 200])
def test_bad_receipt_handles_are_refused(master, handle):
    node, stub = master
    send(stub, "T", [b"x"])
    settle(node)
    _, got = receive(stub, invisible=30)
    before = state_records(node)
    r = stub.AckMessage(s.AckMessageRequest(group=G, topic=d.Resource(name="T"), entries=[
        s.AckMessageEntry(message_id="x", receipt_handle=handle)]))
    assert r.status.code == d.INVALID_RECEIPT_HANDLE and r.entries[0].status.code == d.INVALID_RECEIPT_HANDLE
    # a real handle used with another group is refused too
    other = ack(stub, got, group=d.Resource(name="G2"))
    assert other.status.code == d.INVALID_RECEIPT_HANDLE
    bad_duration = stub.ChangeInvisibleDuration(s.ChangeInvisibleDurationRequest(
        group=G, topic=d.Resource(name="T"), receipt_handle=got[0].system_properties.receipt_handle,
        invisible_duration=Duration(seconds=-1)))
    assert bad_duration.status.code == d.ILLEGAL_INVISIBLE_TIME
    assert state_records(node) == before


def test_an_ack_of_many_entries_appends_one_record_and_answers_each(master, clock):
    """One AckMessage with many entries: one `acks` record holds every valid entry, and each
    entry gets its own result in order (a stale or forged handle is refused, the rest acked)."""
    node, stub = master
    send(stub, "T", [b"%d" % i for i in range(6)])
    settle(node)
    _, got = receive(stub, n=6, invisible=0.5)
    assert len(got) == 6
    assert ack(stub, got[:1]).status.code == d.OK  # got[0]'s handle is stale from now on
    forged = d.Message()
    forged.CopyFrom(got[1])
    forged.system_properties.receipt_handle = "R2:0:0:1:" + "0" * 32
    records = lambda: node.store.max_offset_in_queue(STATE_TOPIC, 0)  # noqa: E731
    settle(node)
    before = records()
    r = ack(stub, [got[0], *got[1:3], forged, *got[3:]])
    assert r.status.code == d.MULTIPLE_RESULTS
    assert [e.status.code for e in r.entries] == [
        d.INVALID_RECEIPT_HANDLE, d.OK, d.OK, d.INVALID_RECEIPT_HANDLE, d.OK, d.OK, d.OK]
    assert [e.receipt_handle for e in r.entries] == [m.system_properties.receipt_handle for m in
                                                     [got[0], *got[1:3], forged, *got[3:]]]
    settle(node)
    assert records() == before + 1
    (record,) = node.store.get_messages(STATE_TOPIC, 0, before, 8).messages
    event = json.loads(record.body)
    assert event["kind"] == "acks" and len(event["items"]) == 5
    clock.advance(1)  # past the invisibility: nothing comes back, every delivery was acked
    assert receive(stub, n=32)[0].code == d.MESSAGE_NOT_FOUND
    assert ack(stub, got[1:]).status.code == d.INVALID_RECEIPT_HANDLE  # acked already


def test_an_ack_with_only_bad_handles_appends_nothing(master):
    node, stub = master
    send(stub, "T", [b"x"])
    settle(node)
    _, got = receive(stub, invisible=30)
    assert ack(stub, got).status.code == d.OK
    settle(node)
    before = node.store.max_phy_offset()
    r = ack(stub, got * 3)  # all stale
    assert r.status.code == d.INVALID_RECEIPT_HANDLE and len(r.entries) == 3
    assert node.store.max_phy_offset() == before


def test_state_survives_a_restart(nodes, clock):
    node = nodes.start("m1", min_invisible_time_ms=500, clock=clock)
    stub = nodes.stub(node)
    sent = {b"%d" % i for i in range(6)}
    send(stub, "T", sorted(sent))
    settle(node)
    _, got = receive(stub, n=4, invisible=0.5)
    assert ack(stub, got[:3]).status.code == d.OK
    node = nodes.restart(node)  # the same store and clock
    stub = nodes.stub(node)
    settle(node)
    _, first = receive(stub, n=32, invisible=30)  # got[3] is still invisible
    assert bodies(first) == sorted(sent - {m.body for m in got})
    clock.advance(0.5)
    st, rest = receive(stub, n=32, invisible=30)
    assert bodies(first + rest) == sorted(sent - {m.body for m in got[:3]})
    redelivered = [m for m in rest if m.body == got[3].body]
    assert redelivered[0].system_properties.delivery_attempt == 2


def test_slave_forwards_and_a_promoted_slave_resumes_from_the_acks(nodes):
    master = nodes.start("master", role="SYNC_MASTER", min_invisible_time_ms=500)
    slave = nodes.slave(master, min_invisible_time_ms=500)
    via_slave = nodes.stub(slave)
    send(via_slave, "T", [b"%d" % i for i in range(5)])
    settle(master)
    _, got = receive(via_slave, n=3, invisible=30)  # forwarded to the master
    assert len(got) == 3 and ack(via_slave, got).status.code == d.OK
    assert slave.messaging.consumers.state.queues == {}  # the slave keeps no state
    nodes.stop(master)
    slave.switch_role("ASYNC_MASTER")
    settle(slave)
    st, rest = receive(via_slave, n=32, invisible=30)
    assert bodies(rest) == sorted({b"%d" % i for i in range(5)} - {m.body for m in got})
    # the promoted node runs its schedule service as a master: delay messages arrive
    assert slave.store.config.broker_role == "ASYNC_MASTER"
    due = Timestamp()
    due.FromMilliseconds(int(time.time() * 1000) + 500)
    send(via_slave, "Later", [b"late"], delivery_timestamp=due)
    st, late = receive(via_slave, topic="Later", wait=5)
    assert [m.body for m in late] == [b"late"]


def test_snapshot_then_replay_gives_the_same_state(master):
    node, stub = master
    send(stub, "T", [b"%d" % i for i in range(4)])
    settle(node)
    _, got = receive(stub, n=4, invisible=30)
    ack(stub, got[:2])
    consumers = node.messaging.consumers
    consumers.table.snapshot_every = 3
    assert consumers.table.maybe_snapshot()
    ack(stub, got[2:3])
    settle(node)  # every state record dispatched (the snapshot thread may have added some)
    consumers.table.persist_views()  # the table service may have written it already
    assert consumers.table.persist_views() == 0  # unchanged since
    import json
    with open(consumers.offset_view.file.path) as f:
        table = json.load(f)["offsetTable"]
    assert table["T@G"][str(got[0].system_properties.queue_id)] == consumers.progress("G")[0].committed_offset
    with open(consumers.group_view.file.path) as f:
        groups = json.load(f)
    assert groups["subscriptionGroupTable"]["G"]["retryMaxTimes"] == 16
    assert groups["subscriptionGroupTable"]["G"]["consumeMessageOrderly"] is False
    assert groups["dataVersion"]["counter"] == consumers.state.group_changes == 1
    replayed = consumers.table.replay()
    assert replayed.queues == consumers.state.queues
    assert replayed.groups == consumers.state.groups
    assert replayed.next_handle == consumers.state.next_handle
    assert replayed.subscription_group_table() == consumers.state.subscription_group_table()


def test_query_assignment_lists_readable_queues(master):
    _, stub = master
    send(stub, "T", [b"x"])
    r = stub.QueryAssignment(s.QueryAssignmentRequest(topic=d.Resource(name="T"), group=G))
    assert r.status.code == d.OK and sorted(a.message_queue.id for a in r.assignments) == [0, 1, 2, 3]
    assert r.assignments[0].message_queue.broker.id == 0
    missing = stub.QueryAssignment(s.QueryAssignmentRequest(topic=d.Resource(name="Nope"), group=G))
    assert missing.status.code == d.TOPIC_NOT_FOUND


def test_telemetry_tells_consumers_their_group_config(master):
    node, stub = master
    node.messaging.consumers.upsert_group("Ordered", fifo=True, retry_max_times=3)

    def settings_for(group):
        settings = d.Settings(client_type=d.PUSH_CONSUMER, subscription=d.Subscription(
            group=d.Resource(name=group)))
        call = stub.Telemetry(iter([s.TelemetryCommand(settings=settings)]), timeout=10)
        return next(call).settings

    known = settings_for("Ordered")
    assert known.subscription.fifo and known.backoff_policy.max_attempts == 4
    unknown = settings_for("Other")
    assert not unknown.subscription.fifo and unknown.subscription.receive_batch_size == 32

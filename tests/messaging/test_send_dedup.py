"""A retried send is stored once (the master's duplicate window, store/dedup/), over real nodes
on 127.0.0.1: SendMessage with one message id to the master and through a slave, a reused id,
the window turned off, a failover, transactional half-sends, the SYNC_MASTER replica wait (a
repeat is never answered OK for a send its slaves have not acknowledged), and the project's
client resending a message."""
from __future__ import annotations

import pytest

from cluster.client.message import Message as ClientMessage
from cluster.client.producer import Producer
from cluster.messaging import transaction_records as tr
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from tests.support.nodes import CLUSTER_SECRET, settle
from tests.support.raw_slave import AckingSlave
from tests.support.v2 import TX_KEYS, TX_TOPIC, end, msg, pull_all, queue_records, send_half
from tests.support.waiting import wait_until

ID = "01C0A80001123400000000000000000042"
QUEUES = 4


def request(body: bytes = b"paid", message_id: str = ID, topic: str = "T") -> s.SendMessageRequest:
    return s.SendMessageRequest(messages=[msg(topic, body, message_id=message_id, keys=["k1"])])


def receipt(response: s.SendMessageResponse) -> list[tuple[int, str, int]]:
    return [(e.status.code, e.message_id, e.offset) for e in response.entries]


def stored(node, topic: str = "T") -> list:
    """Every record of the topic's queues on `node`."""
    settle(node)
    return [m for q in range(QUEUES) for m in queue_records(node, topic, q)]


def test_three_sends_and_one_through_a_slave_store_one_message(nodes):
    master = nodes.start(default_topic_queue_nums=QUEUES)
    slave = nodes.slave(master)
    mstub, sstub = nodes.stub(master), nodes.stub(slave)
    answers = [mstub.SendMessage(request(), timeout=10) for _ in range(3)]
    answers.append(sstub.SendMessage(request(), timeout=10))  # forwarded to the master
    assert [a.status.code for a in answers] == [d.OK] * 4
    assert all(receipt(a) == receipt(answers[0]) for a in answers)
    [(_, message_id, _)] = receipt(answers[0])
    assert message_id == ID
    [record] = stored(master)  # one record, although the sends took turns over the queues
    assert (record.uniq_key, record.body, record.queue_offset) == \
        (ID, b"paid", answers[0].entries[0].offset)
    assert len(master.store.query_messages("T", ID)) == 1  # the key index: once
    window = master.store.duplicates.stats()
    assert (window.hits, window.entries) == (3, 1)
    wait_until(lambda: slave.store.duplicates.get(ID) is not None, 10,
               "the slave's window fed by its reput")


def test_an_id_reused_for_another_body_is_refused_and_writes_nothing(nodes):
    master = nodes.start(default_topic_queue_nums=QUEUES)
    stub = nodes.stub(master)
    assert stub.SendMessage(request(b"one"), timeout=10).status.code == d.OK
    # the topic exists (an auto-created topic's record would be written before the refusal)
    assert stub.SendMessage(request(b"x", "01OTHER", "Other"), timeout=10).status.code == d.OK
    end_offset = master.store.max_phy_offset()
    refused = stub.SendMessage(request(b"two"), timeout=10)
    assert refused.status.code == d.ILLEGAL_MESSAGE_ID and not refused.entries
    assert f"{ID} was stored with another body" in refused.status.message
    refused = stub.SendMessage(request(b"one", topic="Other"), timeout=10)
    assert refused.status.code == d.ILLEGAL_MESSAGE_ID
    assert f"{ID} was stored for topic T, not Other" in refused.status.message
    assert master.store.max_phy_offset() == end_offset
    assert [m.body for m in stored(master)] == [b"one"]
    assert [m.body for m in stored(master, "Other")] == [b"x"]


def test_without_the_window_every_send_is_stored(nodes):
    """The protection above is the window's: duplicateWindowSeconds=0 stores all four."""
    master = nodes.start(default_topic_queue_nums=QUEUES, store={"duplicate_window_seconds": 0})
    slave = nodes.slave(master, store={"duplicate_window_seconds": 0})
    mstub, sstub = nodes.stub(master), nodes.stub(slave)
    for stub in (mstub, mstub, mstub, sstub):
        assert stub.SendMessage(request(), timeout=10).status.code == d.OK
    assert [m.uniq_key for m in stored(master)] == [ID] * 4


def test_a_new_master_answers_a_retry_of_a_send_before_the_failover(nodes):
    master = nodes.start(default_topic_queue_nums=QUEUES)
    slave = nodes.slave(master)
    first = nodes.stub(master).SendMessage(request(), timeout=10)
    assert first.status.code == d.OK
    wait_until(lambda: slave.store.max_phy_offset() == master.store.max_phy_offset(), 10,
               "replicated")
    nodes.stop(master)  # the answer was lost with it, say: the client retries on the slave
    slave.switch_role("ASYNC_MASTER")
    end_offset = slave.store.max_phy_offset()
    retry = nodes.stub(slave).SendMessage(request(), timeout=10)
    assert retry.status.code == d.OK and receipt(retry) == receipt(first)
    assert slave.store.max_phy_offset() == end_offset  # nothing written
    assert [m.uniq_key for m in stored(slave)] == [ID]


def test_a_restarted_master_answers_a_retry_from_its_rebuilt_window(nodes):
    master = nodes.start(default_topic_queue_nums=QUEUES)
    first = nodes.stub(master).SendMessage(request(), timeout=10)
    master = nodes.restart(master)
    assert master.store.duplicates_rebuilt.entries == 1
    retry = nodes.stub(master).SendMessage(request(), timeout=10)
    assert receipt(retry) == receipt(first) and len(stored(master)) == 1


def test_a_retried_half_send_is_its_half_and_the_commit_is_no_repeat(nodes):
    master = nodes.start(**TX_KEYS)
    slave = nodes.slave(master, **TX_KEYS)
    mstub, sstub = nodes.stub(master), nodes.stub(slave)
    entry = send_half(mstub, b"paid", message_id=ID)
    assert send_half(mstub, b"paid", message_id=ID) == entry  # same transaction id
    assert send_half(sstub, b"paid", message_id=ID) == entry
    assert len(queue_records(master, tr.HALF_TOPIC)) == 1
    assert end(mstub, entry, d.COMMIT).code == d.OK
    wait_until(lambda: pull_all(mstub), 5, "the committed message")
    # after the commit (which carries the half's id) a late retry is still the half's repeat
    assert send_half(mstub, b"paid", message_id=ID) == entry
    assert [m.body for m in pull_all(mstub)] == [b"paid"]
    assert len(queue_records(master, tr.HALF_TOPIC)) == 1
    # the same id sent as a normal message is another message: refused
    refused = mstub.SendMessage(request(topic=TX_TOPIC), timeout=10)
    assert refused.status.code == d.ILLEGAL_MESSAGE_ID


@pytest.fixture
def sync_master(nodes):
    """(master, its stub, a raw slave that acks while `acking` is set), in sync."""
    master = nodes.start(role="SYNC_MASTER", default_topic_queue_nums=QUEUES,
                         store={"slave_timeout": 1000})
    with AckingSlave(master.address, "broker-a:7", CLUSTER_SECRET) as slave:
        wait_until(lambda: "broker-a:7" in master.role.master.tracker.in_sync_ids(), 10,
                   "the raw slave in sync")
        yield master, nodes.stub(master), slave


def test_a_repeat_is_ok_only_once_the_original_is_replicated(sync_master):
    master, stub, slave = sync_master
    slave.acking.clear()
    first = stub.SendMessage(request(), timeout=10)
    assert first.status.code == d.SLAVE_PERSISTENCE_TIMEOUT  # stored, not on the slave
    retry = stub.SendMessage(request(), timeout=10)
    assert retry.status.code == d.SLAVE_PERSISTENCE_TIMEOUT  # never OK for it
    assert receipt(retry) == receipt(first)
    slave.acking.set()
    assert stub.SendMessage(request(b"next", "01OTHER"), timeout=10).status.code == d.OK
    retry = stub.SendMessage(request(), timeout=10)
    assert retry.status.code == d.OK and [e[1:] for e in receipt(retry)] == \
        [e[1:] for e in receipt(first)]
    assert sorted(m.body for m in stored(master)) == [b"next", b"paid"]


def test_a_retry_of_a_send_in_flight_waits_for_it(sync_master):
    master, stub, slave = sync_master
    tracker = master.role.master.tracker
    slave.acking.clear()
    original = stub.SendMessage.future(request(), timeout=10)
    wait_until(lambda: tracker.waiting() == 1, 5, "the original waiting for its ack")
    retry = stub.SendMessage.future(request(), timeout=10)
    wait_until(lambda: tracker.waiting() == 2, 5, "the retry waiting for the same ack")
    slave.acking.set()
    assert stub.SendMessage(request(b"next", "01OTHER"), timeout=10).status.code == d.OK
    first, second = original.result(), retry.result()
    assert first.status.code == second.status.code == d.OK
    assert receipt(first) == receipt(second)
    assert len(stored(master)) == 2


def test_the_clients_resend_keeps_the_message_id(nodes):
    """cluster/client: a message keeps the id it got on its first send, so resending it (after
    an unknown outcome) is a repeat, answered with the first receipt."""
    master = nodes.start(default_topic_queue_nums=QUEUES)
    producer = Producer(nodes.connect(master))
    message = ClientMessage("T", b"once")
    first = producer.send(message)
    assert message.message_id == first.message_id
    assert producer.send(message) == first
    assert len(stored(master)) == 1

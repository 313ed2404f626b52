"""Transactional messages over the v2 protocol against in-process nodes (our generated stubs):
half messages, EndTransaction, the check-back over Telemetry, give-up after
transactionCheckMax, rebuilding the state from the commitlog after a restart and a failover,
and a slave relaying its producers' streams to the master.

The check-back service is stepped by the tests with a ManualClock (transactionCheckInterval is
an hour, so its own thread never runs a round while a test looks)."""
from __future__ import annotations

import threading
import time

from google.protobuf.timestamp_pb2 import Timestamp

from cluster.messaging import transaction_records as tr
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store import codec
from tests.support.nodes import dispatched, settle
from tests.support.v2 import (TX_KEYS, Producer, checker_at, end, later, pull_all, queue_records,
                              send_half, tx_msg)
from tests.support.v2 import TX_TOPIC as TOPIC
from tests.support.waiting import wait_until


# -- half messages, commit, rollback ------------------------------------------------------------
def test_half_message_is_invisible_until_committed_once(nodes):
    node = nodes.start(**TX_KEYS)
    stub = nodes.stub(node)
    entry = send_half(stub, b"paid", tag="TagA", keys=["order-1"])
    assert len(entry.transaction_id) == 65 and entry.message_id
    settle(node)
    assert pull_all(stub) == [] and node.store.max_offset_in_queue(TOPIC, 0) == 0
    [half] = queue_records(node, tr.HALF_TOPIC)
    assert half.msg_id == entry.transaction_id.split("-")[0] and half.sys_flag & codec.SysFlag.TRANSACTION_MASK == 0
    p = half.properties
    assert (p["REAL_TOPIC"], p["REAL_QID"], p["TRAN_MSG"], p["PGROUP"]) == (TOPIC, "0", "true", TOPIC)
    assert p["UNIQ_KEY"] == p["__transactionId__"] == entry.message_id and p["TAGS"] == "TagA"

    assert end(stub, entry, d.COMMIT).code == d.OK
    wait_until(lambda: pull_all(stub), 5, "the committed message")
    [m] = pull_all(stub)
    assert (m.body, m.system_properties.message_id, m.system_properties.tag) == \
        (b"paid", entry.message_id, "TagA")
    assert m.system_properties.message_type == d.TRANSACTION and list(m.system_properties.keys) == ["order-1"]
    assert not set(m.user_properties) & {"REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP"}
    [committed] = queue_records(node, TOPIC)
    assert committed.sys_flag & codec.SysFlag.TRANSACTION_MASK == codec.SysFlag.TRANSACTION_COMMIT_TYPE
    assert committed.prepared_transaction_offset == half.physical_offset
    assert "REAL_TOPIC" not in committed.properties and "TRAN_MSG" not in committed.properties
    [op] = queue_records(node, tr.OP_TOPIC)
    assert (op.tags, op.body) == ("d", str(half.queue_offset).encode())
    # a second EndTransaction (either way) is refused and writes nothing
    end_offset = node.store.max_phy_offset()
    for resolution in (d.COMMIT, d.ROLLBACK):
        st = end(stub, entry, resolution)
        assert st.code == d.INVALID_TRANSACTION_ID and "already committed" in st.message, st
    assert node.store.max_phy_offset() == end_offset
    assert len(pull_all(stub)) == 1


def test_rollback_is_never_visible(nodes):
    node = nodes.start(**TX_KEYS)
    stub = nodes.stub(node)
    entry = send_half(stub, b"cancelled")
    assert end(stub, entry, d.ROLLBACK).code == d.OK
    wait_until(lambda: queue_records(node, tr.OP_TOPIC), 5, "the op record")
    assert pull_all(stub) == [] and node.store.max_offset_in_queue(TOPIC, 0) == 0
    end_offset = node.store.max_phy_offset()
    st = end(stub, entry, d.COMMIT)
    assert st.code == d.INVALID_TRANSACTION_ID and "rolled back" in st.message
    assert node.store.max_phy_offset() == end_offset and pull_all(stub) == []


def test_concurrent_end_transactions_resolve_once(nodes):
    node = nodes.start(**TX_KEYS)
    stub = nodes.stub(node)
    entry = send_half(stub, b"raced")
    results: list = []
    barrier = threading.Barrier(8)

    def race(i):
        barrier.wait()
        results.append(end(stub, entry, d.COMMIT if i % 2 else d.ROLLBACK).code)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert sorted(results).count(d.OK) == 1 and results.count(d.INVALID_TRANSACTION_ID) == 7
    assert len(queue_records(node, tr.OP_TOPIC)) == 1
    assert len(pull_all(stub)) <= 1


def test_unknown_resolution_keeps_the_transaction_open(nodes):
    node = nodes.start(**TX_KEYS)
    stub = nodes.stub(node)
    entry = send_half(stub)
    end_offset = node.store.max_phy_offset()
    assert end(stub, entry, d.TRANSACTION_RESOLUTION_UNSPECIFIED).code == d.OK
    assert node.store.max_phy_offset() == end_offset
    assert [h.root for h in node.messaging.transactions.open_transactions()] == [0]
    assert end(stub, entry, d.COMMIT).code == d.OK


def test_bad_ids_and_mismatches_write_nothing(nodes):
    node = nodes.start(**TX_KEYS)
    stub = nodes.stub(node)
    r = stub.SendMessage(s.SendMessageRequest(messages=[tx_msg(b"plain", message_type=d.NORMAL)]),
                         timeout=5)
    assert r.status.code == d.OK
    entry = send_half(stub)
    settle(node)
    [normal] = queue_records(node, TOPIC)
    ip, port = codec.parse_host(normal.store_host)
    offset_id = entry.transaction_id.split("-")[0]
    inside = codec.offset_msg_id(ip, port, int(offset_id[-16:], 16) + 4)

    def signed(offset_msg_id: str) -> str:  # as if the node had issued it: the record checks
        return tr.transaction_id(node.messaging.transactions.key, offset_msg_id, TOPIC,
                                 entry.message_id)
    end_offset = node.store.max_phy_offset()
    cases = [
        (dict(transaction_id=""), d.INVALID_TRANSACTION_ID),
        (dict(transaction_id="not-hex"), d.INVALID_TRANSACTION_ID),
        (dict(transaction_id=offset_id), d.INVALID_TRANSACTION_ID),  # old format: no MAC
        (dict(transaction_id=signed("AB" * 16)), d.INVALID_TRANSACTION_ID),  # beyond the log
        (dict(transaction_id=signed(normal.msg_id)), d.INVALID_TRANSACTION_ID),  # not a half
        (dict(transaction_id=signed(inside)), d.INVALID_TRANSACTION_ID),  # inside a record
        (dict(topic="Other"), d.INVALID_TRANSACTION_ID),
        (dict(message_id="01OTHER"), d.INVALID_TRANSACTION_ID),  # issued for another message
        (dict(message_id=""), d.ILLEGAL_MESSAGE_ID),
        (dict(topic="a b"), d.ILLEGAL_TOPIC),
        (dict(resolution=7), d.BAD_REQUEST),
    ]
    for kw, code in cases:
        st = end(stub, entry, **kw)
        assert st.code == code, (kw, st)
    assert node.store.max_phy_offset() == end_offset
    assert end(stub, entry, d.COMMIT).code == d.OK  # the right one still works


def test_transactional_send_refusals_write_nothing(nodes):
    node = nodes.start(**TX_KEYS)
    stub = nodes.stub(node)
    end_offset = node.store.max_phy_offset()
    cases = [([tx_msg(), tx_msg()], d.BAD_REQUEST),
             ([tx_msg(), tx_msg(message_type=d.NORMAL)], d.BAD_REQUEST),
             ([tx_msg(delivery_timestamp=Timestamp(seconds=int(time.time()) + 60))],
              d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
             ([tx_msg(tag="a|b")], d.ILLEGAL_MESSAGE_TAG),
             ([tx_msg(topic="RMQ_SYS_TRANS_HALF_TOPIC")], d.ILLEGAL_TOPIC)]
    for messages, code in cases:
        r = stub.SendMessage(s.SendMessageRequest(messages=messages), timeout=5)
        assert r.status.code == code, (code, r.status)
    assert node.store.max_phy_offset() == end_offset


def test_the_recovery_duration_delays_the_first_check(nodes):
    node = nodes.start(**TX_KEYS)
    stub = nodes.stub(node)
    sp = d.SystemProperties()
    sp.orphaned_transaction_recovery_duration.seconds = 3600
    entry = send_half(stub, orphaned_transaction_recovery_duration=sp.orphaned_transaction_recovery_duration)
    producer = Producer(stub)
    try:
        assert checker_at(node, later()).step().checked == []  # past transactionTimeOut only
        assert checker_at(node, later(3601)).step().checked == [0]
        assert producer.command().message.system_properties.message_id == entry.message_id
    finally:
        producer.close()


# -- check-back ---------------------------------------------------------------------------------
def test_check_back_over_telemetry_and_the_producers_answer(nodes):
    node = nodes.start(**TX_KEYS)
    stub = nodes.stub(node)
    entry = send_half(stub, b"orphan", tag="T1", keys=["k-1"])
    other = send_half(stub, b"answered")
    assert end(stub, other, d.ROLLBACK).code == d.OK
    checker = checker_at(node, later())
    # nobody to ask: nothing is written, the check does not count
    end_offset = node.store.max_phy_offset()
    done = checker.step()
    assert (done.checked, done.waiting) == ([], [0])
    assert node.store.max_phy_offset() == end_offset
    unrelated = Producer(stub, topics=("Unrelated",), client_id="producer-0")
    producer = Producer(stub)
    try:
        assert checker_at(node, later(0)).step().checked == []  # not due yet by the clock
        done = checker_at(node, later()).step()
        assert done.checked == [0] and done.rolled_back == []
        cmd = producer.command()
        assert unrelated.received.empty()
        m = cmd.message
        assert (m.topic.name, m.body, m.system_properties.message_id, m.system_properties.tag) == \
            (TOPIC, b"orphan", entry.message_id, "T1")
        assert m.system_properties.message_type == d.TRANSACTION and list(m.system_properties.keys) == ["k-1"]
        assert not set(m.user_properties) & {"TRANSACTION_CHECK_TIMES", "REAL_TOPIC"}
        assert cmd.transaction_id != entry.transaction_id  # the check copy's id
        copies = queue_records(node, tr.HALF_TOPIC)
        assert [c.properties.get("TRANSACTION_CHECK_TIMES") for c in copies] == [None, None, "1"]
        assert copies[-1].properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0"
        # the producer's checker answers
        answer = s.EndTransactionRequest(topic=d.Resource(name=TOPIC),
                                         message_id=m.system_properties.message_id,
                                         transaction_id=cmd.transaction_id, resolution=d.COMMIT,
                                         source=d.SOURCE_SERVER_CHECK)
        assert stub.EndTransaction(answer, timeout=5).status.code == d.OK
        wait_until(lambda: pull_all(stub), 5, "the committed message")
        assert [x.body for x in pull_all(stub)] == [b"orphan"]
        # the original id names the same transaction: refused; no more checks
        assert end(stub, entry, d.COMMIT).code == d.INVALID_TRANSACTION_ID
        assert checker_at(node, later()).step().checked == []
        assert node.messaging.transactions.open_transactions() == []
    finally:
        producer.close()
        unrelated.close()
    wait_until(lambda: not node.messaging.telemetry.streams(), 5, "streams closed")


def test_rolled_back_after_transaction_check_max(nodes):
    node = nodes.start(transaction_check_max=2, **TX_KEYS)
    stub = nodes.stub(node)
    entry = send_half(stub)
    producer = Producer(stub)  # never answers
    try:
        rounds = [checker_at(node, later(60 * (i + 1))).step() for i in range(3)]
        assert [r.checked for r in rounds] == [[0], [0], []]
        assert rounds[2].rolled_back == [0]
        ids = [producer.command().transaction_id for _ in range(2)]
        assert len(set(ids)) == 2
        for transaction_id in ids + [entry.transaction_id]:
            st = end(stub, entry, d.COMMIT, transaction_id=transaction_id)
            assert st.code == d.INVALID_TRANSACTION_ID and "rolled back" in st.message
        assert checker_at(node, later(600)).step().checked == []
        settle(node)
        assert pull_all(stub) == []
        [op] = queue_records(node, tr.OP_TOPIC)
        assert op.body == b"2"  # the newest check copy
    finally:
        producer.close()


# -- the state lives in the commitlog ----------------------------------------------------------
def test_state_is_rebuilt_after_a_restart(nodes):
    node = nodes.start(**TX_KEYS)
    stub = nodes.stub(node)
    committed, rolled_back, open_one = (send_half(stub, b"c"), send_half(stub, b"r"),
                                        send_half(stub, b"o"))
    assert end(stub, committed, d.COMMIT).code == d.OK
    assert end(stub, rolled_back, d.ROLLBACK).code == d.OK
    producer = Producer(stub)
    assert checker_at(node, later()).step().checked == [2]
    check = producer.command()
    producer.close()
    again = nodes.restart(node)  # the same store and port
    stub = nodes.stub(again)
    again.messaging.transactions.ensure_loaded()
    [half] = again.messaging.transactions.open_transactions()
    assert (half.root, half.check_times) == (2, 1)
    for entry in (committed, rolled_back):
        assert end(stub, entry, d.COMMIT).code == d.INVALID_TRANSACTION_ID
    assert end(stub, open_one, d.COMMIT, transaction_id=check.transaction_id).code == d.OK
    assert end(stub, open_one, d.COMMIT).code == d.INVALID_TRANSACTION_ID
    wait_until(lambda: len(pull_all(stub)) == 2, 5, "both committed messages")
    assert sorted(m.body for m in pull_all(stub)) == [b"c", b"o"]


def test_slave_relays_checks_forwards_answers_and_resumes_as_master(nodes):
    master = nodes.start(**TX_KEYS)
    slave = nodes.slave(master, **TX_KEYS)
    mstub, sstub = nodes.stub(master), nodes.stub(slave)
    producer = Producer(sstub)  # the producer's stream is on the slave
    try:
        wait_until(lambda: master.messaging.telemetry.producers_of(TOPIC), 10,
                   "the slave relaying the producer's stream to the master")
        [relayed] = master.messaging.telemetry.producers_of(TOPIC)
        assert relayed.relayed and relayed.client_id == "producer-1"
        assert master.messaging.relay.active() == 0  # a relayed stream is not relayed again
        first, second = send_half(mstub, b"one"), send_half(sstub, b"two")  # forwarded send
        assert checker_at(master, later()).step().checked == [0, 1]
        commands = {c.message.system_properties.message_id: c
                    for c in (producer.command(), producer.command())}
        assert set(commands) == {first.message_id, second.message_id}
        # the checker's answer goes to the slave, which forwards it
        st = end(sstub, first, d.COMMIT, source=d.SOURCE_SERVER_CHECK,
                 transaction_id=commands[first.message_id].transaction_id)
        assert st.code == d.OK, st
        wait_until(lambda: pull_all(mstub), 5, "committed on the master")
        wait_until(lambda: slave.store.max_phy_offset() == master.store.max_phy_offset() and
                   dispatched(slave), 10, "replicated")
        assert [m.body for m in pull_all(sstub)] == [b"one"]
        # failover: the promoted slave rebuilds the open transactions and checks them itself
        nodes.stop(master)
        slave.switch_role("ASYNC_MASTER")
        transactions = slave.messaging.transactions
        transactions.ensure_loaded()
        [half] = transactions.open_transactions()
        assert (half.root, half.check_times) == (1, 1)
        assert checker_at(slave, later(120)).step().checked == [1]
        cmd = producer.command()
        assert cmd.message.system_properties.message_id == second.message_id
    finally:
        producer.close()
    assert end(sstub, second, d.COMMIT, transaction_id=cmd.transaction_id).code == d.OK
    assert end(sstub, first, d.ROLLBACK).code == d.INVALID_TRANSACTION_ID
    wait_until(lambda: len(pull_all(sstub)) == 2, 5, "both on the new master")

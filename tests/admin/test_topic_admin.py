"""Admin topic calls against real in-process nodes (master + slave): create, update, list with
offsets, delete; reserved names, bad values and writes on a slave are refused and change
nothing; the table is the replicated one QueryRoute uses, config/topics.json its view."""
from __future__ import annotations

import json
import os

import grpc
import pytest

from proto import admin_pb2 as pb
from store.layout import CONFIG_DIR, TOPICS_FILE
from tests.support.admin import code_of, messages
from tests.support.nodes import settle


@pytest.fixture(scope="module")
def cluster(pair):
    return pair.master, pair.slave, pair.m, pair.s


def saved_topics(node) -> dict:
    """config/topics.json, the view the table service rewrites (within a second)."""
    node.messaging.topics.table.replicated.persist_views()  # what the service's step does
    path = os.path.join(node.config.store.store_path_root_dir, CONFIG_DIR, TOPICS_FILE)
    with open(path, encoding="utf-8") as f:
        return json.load(f)["topicConfigTable"]


def test_create_update_list_delete(cluster):
    master, _, m, _ = cluster
    t = m.create_topic("Orders", queue_nums=3)
    assert (t.name, t.read_queue_nums, t.write_queue_nums, t.perm, t.perm_name, t.kind) == \
        ("Orders", 3, 3, 6, "RW", "NORMAL")
    assert saved_topics(master)["Orders"]["readQueueNums"] == 3
    assert master.messaging.topics.get("Orders").write_queue_nums == 3  # routes see it at once
    default = m.create_topic("Defaults")
    assert (default.read_queue_nums, default.perm) == (master.config.default_topic_queue_nums, 6)

    u = m.update_topic("Orders", write_queue_nums=2, perm=4, order=True)
    assert (u.read_queue_nums, u.write_queue_nums, u.perm_name, u.order) == (3, 2, "R-", True)
    assert saved_topics(master)["Orders"]["perm"] == 4

    r = m.send(messages("Orders", 9, queues=3))
    assert r.status == "PUT_OK"
    settle(master)
    listed = {t.name: t for t in m.list_topics(with_offsets=True).topics}
    orders = listed["Orders"]
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in orders.queues] == \
        [(0, 0, 3), (1, 0, 3), (2, 0, 3)]
    assert orders.messages == 9 and orders.configured
    assert not listed["Defaults"].queues or all(q.max_offset == 0 for q in listed["Defaults"].queues)
    assert m.list_topics(topic="Orders").topics[0].queues == []  # offsets only on request

    gone = m.delete_topic("Orders")
    assert gone.deleted.name == "Orders" and "retention" in gone.note
    assert "Orders" not in saved_topics(master)
    # the data stays until retention: listed as not configured, still readable by offset
    left = m.list_topics(topic="Orders", with_offsets=True).topics[0]
    assert not left.configured and left.messages == 9
    assert len(m.get("Orders", 0, 0, 10).messages) == 3


def test_system_topics_are_hidden_unless_asked_and_flagged(cluster):
    master, _, m, _ = cluster
    m.send([pb.Message(topic="Visible", body=b"x")])
    m.upsert_group("TopicListGroup")  # writes the consumer state topic (rmq_sys_...)
    settle(master)
    names = {t.name: t.kind for t in m.list_topics().topics}
    assert "Visible" in names and all(k != "SYSTEM" for k in names.values())
    everything = {t.name: t.kind for t in m.list_topics(include_system=True).topics}
    assert everything["rmq_sys_CONSUMER_STATE"] == "SYSTEM"


@pytest.mark.parametrize("name", ["SCHEDULE_TOPIC_XXXX", "rmq_sys_anything", "RMQ_SYS_TRACE_TOPIC",
                                  "TBW102", "%RETRY%group", "%DLQ%group"])
def test_reserved_topics_are_protected(cluster, name):
    master, _, m, _ = cluster
    before = master.messaging.topics.table.data_version
    for call in (lambda: m.create_topic(name), lambda: m.update_topic(name, perm=6),
                 lambda: m.delete_topic(name)):
        code, details = code_of(call)
        assert code == grpc.StatusCode.PERMISSION_DENIED and "reserved" in details, details
    assert master.messaging.topics.table.data_version == before


@pytest.mark.parametrize("fields, text", [
    ({"queue_nums": 0}, "1..1024"), ({"read_queue_nums": 1025}, "1..1024"),
    ({"write_queue_nums": -1}, "1..1024"), ({"perm": 7}, "perm 7"), ({"perm": 0}, "perm 0"),
    ({"queue_nums": 2, "read_queue_nums": 2}, "not both")])
def test_bad_values_are_refused(cluster, fields, text):
    master, _, m, _ = cluster
    code, details = code_of(lambda: m.create_topic("BadValues", **fields))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and text in details, details
    assert master.messaging.topics.get("BadValues") is None


def test_names_existence_and_empty_updates(cluster):
    _, _, m, _ = cluster
    assert code_of(lambda: m.create_topic("bad name!"))[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(lambda: m.create_topic(""))[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(lambda: m.create_topic("x" * 200))[0] == grpc.StatusCode.INVALID_ARGUMENT
    m.create_topic("Twice", queue_nums=2)
    code, details = code_of(lambda: m.create_topic("Twice", queue_nums=8))
    assert code == grpc.StatusCode.ALREADY_EXISTS and "update" in details
    assert m.list_topics(topic="Twice").topics[0].read_queue_nums == 2
    assert code_of(lambda: m.update_topic("Twice"))[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(lambda: m.update_topic("Nope", perm=6))[0] == grpc.StatusCode.NOT_FOUND
    assert code_of(lambda: m.delete_topic("Nope"))[0] == grpc.StatusCode.NOT_FOUND
    assert code_of(lambda: m.list_topics(topic="Nope"))[0] == grpc.StatusCode.NOT_FOUND


def test_a_slave_refuses_topic_writes_naming_its_master(cluster):
    master, slave, m, s = cluster
    m.create_topic("OnMaster")
    for call in (lambda: s.create_topic("OnSlave"), lambda: s.update_topic("OnMaster", perm=4),
                 lambda: s.delete_topic("OnMaster")):
        code, details = code_of(call)
        assert code == grpc.StatusCode.FAILED_PRECONDITION, details
        assert master.address in details and "slave" in details
    assert slave.messaging.topics.get("OnSlave") is None
    assert master.messaging.topics.get("OnMaster").perm == 6
    s.list_topics()  # reads work on a slave


def test_admin_send_to_an_unknown_topic_records_it_in_the_table_first(cluster):
    """Admin SendMessages bypasses SendMessage's auto-creation; without this the messages sat in
    a topic no route listed (the audit's unroutable_queue)."""
    master, _, m, s = cluster
    assert m.send(messages("SentOnly", 12, queues=6)).status == "PUT_OK"
    learnt = master.messaging.topics.get("SentOnly")
    n = max(master.config.default_topic_queue_nums, 6)
    assert (learnt.read_queue_nums, learnt.write_queue_nums) == (n, n)
    [listed] = m.list_topics(topic="SentOnly").topics
    assert listed.configured and listed.read_queue_nums == n
    m.create_topic("Narrow", queue_nums=2)
    assert m.send(messages("Narrow", 2, queues=2)).status == "PUT_OK"
    assert master.messaging.topics.get("Narrow").read_queue_nums == 2  # a known topic is left alone
    code, _ = code_of(lambda: s.send(messages("OnSlaveOnly", 1)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert master.messaging.topics.get("OnSlaveOnly") is None

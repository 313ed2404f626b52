"""The node's replicated topic table: which changes wait for durability and which do not, the
one-time import of an old-style config/topics.json, the topics.json view, and followers on real
in-process nodes (a slave's table is its master's; a diverged slave that is truncated forgets
what was cut)."""
from __future__ import annotations

import json
import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.metadata.topic_state import (TOPIC_RECORDS, TOPIC_TABLE_TOPIC, delete_event,
                                          upsert_event)
from cluster.metadata.topic_table import TopicExists, TopicMissing, TopicTable
from cluster.config.node_role import NotMaster
from store.json_config import PERM_READ, TopicConfig, TopicConfigTable
from store.layout import StoreLayout
from store.put_result import PutStatus

from tests.support.leader_store import LeaderStore
from tests.support.waiting import wait_until


def topic_table(ls: LeaderStore) -> TopicTable:
    return TopicTable(ls.role, ls.store, ls.clock)


def records(ls: LeaderStore) -> list[dict]:
    ls.dispatched()
    return [json.loads(m.body) for m in ls.store.get_messages(TOPIC_TABLE_TOPIC, 0, 0, 100).messages]


def test_create_update_delete(leader):
    table = topic_table(leader)
    assert table.create(TopicConfig("Orders", 8, 8)).status is PutStatus.PUT_OK
    with pytest.raises(TopicExists):
        table.create(TopicConfig("Orders", 2, 2))
    old, new, result = table.update("Orders", lambda c: TopicConfig("Orders", 8, 4, PERM_READ))
    assert (old.write_queue_nums, new.write_queue_nums, result.status) == (8, 4, PutStatus.PUT_OK)
    assert table.get("Orders") == new
    with pytest.raises(TopicMissing):
        table.update("Nope", lambda c: c)
    deleted, _ = table.delete("Orders")
    assert deleted == new and table.get("Orders") is None and table.data_version[1] == 3
    with pytest.raises(TopicMissing):
        table.delete("Orders")
    assert [(r["kind"], r.get("by")) for r in records(leader)] == [
        ("upsert", "admin"), ("upsert", "admin"), ("delete", None)]


def test_admin_changes_wait_and_broker_additions_do_not(tmp_path):
    # a SYNC_MASTER without slaves: whatever waits for a slave's ack times out
    ls = LeaderStore(str(tmp_path), sync_master=True, slave_timeout=300, in_sync_replicas=2)
    try:
        table = topic_table(ls)
        started = time.monotonic()
        added = table.add_missing(TopicConfig("%DLQ%G", 1, 1), "ensure")
        assert added.read_queue_nums == 1 and time.monotonic() - started < 0.25
        assert table.add_missing(TopicConfig("%DLQ%G", 5, 5), "ensure") == added  # kept
        started = time.monotonic()
        assert table.create(TopicConfig("Orders", 8, 8)).status is PutStatus.FLUSH_SLAVE_TIMEOUT
        assert time.monotonic() - started >= 0.25
        assert table.get("Orders").read_queue_nums == 8  # stored on the master meanwhile
    finally:
        ls.close()


def test_changes_need_the_master_and_reads_do_not(leader):
    table = topic_table(leader)
    table.create(TopicConfig("Orders", 8, 8))
    leader.follow()
    leader.confirm()
    for change in (lambda: table.create(TopicConfig("X")),
                   lambda: table.add_missing(TopicConfig("Y"), "auto"),
                   lambda: table.delete("Orders")):
        with pytest.raises(NotMaster):
            change()
    assert table.get("Orders").read_queue_nums == 8  # the follower's copy


def legacy_file(root: str, *configs: TopicConfig) -> str:
    path = StoreLayout(root).topics
    old = TopicConfigTable(path)
    for c in configs:
        old.put(c)
    return path


def test_an_old_topics_json_is_imported_once_on_the_first_lead(tmp_path):
    root = str(tmp_path / "node")
    path = legacy_file(root, TopicConfig("Orders", 8, 8, order=True,
                                         attributes={"+message.type": "FIFO"}),
                       TopicConfig("Logs", 2, 2))
    ls = LeaderStore(root)
    try:
        table = topic_table(ls)
        assert table.get("Orders") == TopicConfig("Orders", 8, 8, order=True,
                                                  attributes={"+message.type": "FIFO"})
        [imported] = records(ls)
        assert imported["kind"] == "import" and len(imported["topics"]) == 2
        assert table.replicated.persist_views() == 1
        with open(path) as f:
            view = json.load(f)
        assert view["dataVersion"]["counter"] == 2 and set(view["topicConfigTable"]) == {
            "Orders", "Logs"}
        legacy_file(root, TopicConfig("HandEdited"))  # a file edited after the import
        ls.master.stop("again")
        ls.lead()
        again = topic_table(ls)  # e.g. the node restarted
        assert [c.topic_name for c in again.all()] == ["Logs", "Orders"]
        assert len(records(ls)) == 1
    finally:
        ls.close()


def test_a_follower_never_imports_and_keeps_the_old_file_until_the_table_has_records(tmp_path):
    root = str(tmp_path / "node")
    path = legacy_file(root, TopicConfig("Orders", 8, 8))
    ls = LeaderStore(root)
    try:
        ls.follow()
        table = topic_table(ls)
        assert table.all() == [] and table.replicated.persist_views() == 0
        with open(path) as f:
            assert "Orders" in json.load(f)["topicConfigTable"]  # the import's source, kept
    finally:
        ls.close()


# -- followers on real nodes ----------------------------------------------------------------------
def topics_of(node) -> dict[str, int]:
    return {c.topic_name: c.read_queue_nums for c in node.messaging.topics.all()}


def test_a_slave_has_its_masters_table_and_view(nodes):
    master = nodes.start("master", role="SYNC_MASTER")
    slave = nodes.slave(master)
    admin = nodes.admin(master)
    admin.create_topic("Orders", queue_nums=8)  # answered once the slave acked the record,
    # served by the slave once the confirm offset covers it (the next chunk or heartbeat)
    wait_until(lambda: topics_of(slave) == {"Orders": 8}, 10, "Orders on the slave")
    admin.update_topic("Orders", queue_nums=16)
    wait_until(lambda: topics_of(slave) == {"Orders": 16}, 10, "the update on the slave")
    listed = nodes.admin(slave).list_topics().topics
    assert [(t.name, t.read_queue_nums, t.configured) for t in listed] == [("Orders", 16, True)]
    path = StoreLayout(slave.config.store.store_path_root_dir).topics
    wait_until(lambda: os.path.exists(path), 10, "the slave's topics.json view")
    with open(path) as f:
        assert json.load(f)["topicConfigTable"]["Orders"]["readQueueNums"] == 16


def test_a_diverged_slave_forgets_the_topics_its_truncation_cut(nodes):
    master = nodes.start("m")
    s1 = nodes.slave(master, "s1", broker_id=1)
    s2 = nodes.slave(master, "s2", broker_id=2)
    admin = nodes.admin(master)
    admin.create_topic("Base", queue_nums=8)
    wait_until(lambda: topics_of(s1) == topics_of(s2) == {"Base": 8}, 10, "Base on both slaves")
    nodes.stop(s2)
    admin.create_topic("Late", queue_nums=6)
    wait_until(lambda: "Late" in topics_of(s1), 10, "Late on s1")
    nodes.stop(master)
    # s2, which never saw Late, becomes master in epoch 2 and writes its own topic
    new = nodes.start("s2", role="ASYNC_MASTER", broker_id=2)
    nodes.admin(new).create_topic("Other", queue_nums=3)
    # s1 follows it: truncated to the end of epoch 1 on s2, which cuts the Late record
    nodes.admin(s1).switch_role("SLAVE", new.address)
    wait_until(lambda: topics_of(s1) == {"Base": 8, "Other": 3}, 15,
               f"s1 to drop Late and learn Other (has {topics_of(s1)})")


def test_a_node_with_an_old_topics_json_imports_it_when_it_first_leads(nodes):
    root = os.path.join(nodes.root, "master")
    legacy_file(root, TopicConfig("Wide", 8, 8), TopicConfig("Narrow", 1, 1, perm=PERM_READ))
    master = nodes.start("master")
    slave = nodes.slave(master)
    stub_topics = {c.topic_name: c for c in master.messaging.topics.all()}
    assert (stub_topics["Wide"].read_queue_nums, stub_topics["Narrow"].perm) == (8, PERM_READ)
    wait_until(lambda: topics_of(slave) == {"Wide": 8, "Narrow": 1}, 10, "the import replicated")
    master = nodes.restart(master)  # the file is a view now: no second import
    assert topics_of(master) == {"Wide": 8, "Narrow": 1}
    master.store.reput.catch_up()
    assert master.store.max_offset_in_queue(TOPIC_TABLE_TOPIC, 0) == 1


# -- a follower is its master's table at the same log position (property) ------------------------
names = st.sampled_from(["A", "B", "C"])
change = st.one_of(
    st.builds(lambda n, q, ts: upsert_event(TopicConfig(n, q, q), ts, "admin"),
              names, st.integers(1, 16), st.integers(0, 10 ** 6)),
    st.builds(lambda n, ts: delete_event(n, ts), names, st.integers(0, 10 ** 6)))
rounds = st.lists(st.tuples(
    st.lists(change, min_size=1, max_size=3),  # records replicated and confirmed
    st.one_of(st.none(), st.integers(0, 10 ** 6)),  # then maybe a cut (which record boundary)
    st.booleans()), max_size=8)  # then maybe a read


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=rounds)
def test_a_follower_equals_a_replay_of_what_it_dispatched(tmp_path_factory, rounds):
    ls = LeaderStore(str(tmp_path_factory.mktemp("follower")))
    try:
        ls.store.reput.stop()  # dispatch only when the test says so
        ls.follow()
        table = topic_table(ls)
        starts: list[int] = []  # where each replicated record starts (a cut lands on one)
        for changes, cut, read in [*rounds, ([], None, True)]:
            if changes:
                r = ls.store.put_messages([TOPIC_RECORDS.to_message(e) for e in changes],
                                          allow_system_topic=True)
                starts += [a.wrote_offset for a in r.appends]
                ls.confirm()
            if cut is not None and starts:  # a diverged slave truncated to a consistent point
                at = starts[cut % len(starts)]
                ls.store.truncate(at)
                starts = [s for s in starts if s < at]
            if read:  # reads come whenever, not after every change
                replayed = table.replicated.replay()
                assert table.state().topics == replayed.topics
                assert table.data_version == replayed.data_version
    finally:
        ls.close()

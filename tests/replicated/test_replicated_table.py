"""The generic replicated table on a real store: append-then-apply, replay, refusals, snapshots,
views, and loading per master role. A tiny counter table is the state under test."""
from __future__ import annotations

import json
import os
from typing import Any

import pytest

from store.put_result import PutStatus

from cluster.config.node_role import Follower, NotMaster
from cluster.replicated.replicated_table import AppendRefused, ReplicatedTable, TableService
from cluster.replicated.table_records import TableRecordError, TableRecords
from tests.support.leader_store import LeaderStore

RECORDS = TableRecords("rmq_sys_TEST_TABLE", no_wait_kinds=frozenset({"note"}))


class Counters:
    """A pure state: named counters. Events: add {name, by}; note (no effect); snapshot."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}
        self.version = 0
        self.events_since_snapshot = 0

    def apply(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        if kind == "add":
            self.values[event["name"]] = self.values.get(event["name"], 0) + int(event["by"])
        elif kind == "snapshot":
            self.values = dict(event["values"])
        elif kind != "note":
            raise ValueError(f"unknown event {kind!r}")
        self.version += 1
        self.events_since_snapshot = 0 if kind == "snapshot" else self.events_since_snapshot + 1

    def snapshot_event(self) -> dict[str, Any]:
        return {"kind": "snapshot", "values": dict(self.values)}

    def is_empty(self) -> bool:
        return not self.values


def add(name: str, by: int = 1) -> dict[str, Any]:
    return {"kind": "add", "name": name, "by": by}


def counters_table(leader: LeaderStore, **kw) -> ReplicatedTable[Counters]:
    return ReplicatedTable(RECORDS, Counters, leader.role, leader.store, leader.clock, **kw)


def test_change_appends_then_applies_and_replay_rebuilds_the_state(leader):
    table = counters_table(leader)
    before = leader.store.max_phy_offset()
    assert table.change([add("a"), add("b", 5)]).status is PutStatus.PUT_OK
    assert table.change([add("a", 2)]).status is PutStatus.PUT_OK
    assert table.state.values == {"a": 3, "b": 5}
    assert leader.store.max_phy_offset() > before
    leader.dispatched()
    replayed = table.replay()
    assert replayed.values == table.state.values and replayed.version == 3
    tags = [m.tags for m in leader.store.get_messages(RECORDS.topic, 0, 0, 10).messages]
    assert tags == ["add", "add", "add"]


def test_a_refused_append_applies_nothing(leader):
    table = counters_table(leader)
    table.ensure_loaded()
    leader.master.stop("test")  # a stopped master refuses appends with SERVICE_NOT_AVAILABLE
    with table.lock, pytest.raises(AppendRefused) as refused:
        table.commit(leader.master, [add("a")])
    assert refused.value.result.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert table.state.values == {} and table.state.version == 0


def test_a_follower_has_no_table(leader):
    table = counters_table(leader)
    leader.role.set(Follower("127.0.0.1:1"))
    with pytest.raises(NotMaster) as e:
        table.change([add("a")])
    assert e.value.master_address == "127.0.0.1:1"
    assert table.loaded_for_current_master() is None and not table.maybe_snapshot()


def test_a_new_master_role_replays_what_the_log_holds(leader):
    table = counters_table(leader)
    table.change([add("a", 7)])
    table.state.values["ghost"] = 1  # memory that never reached the log
    leader.dispatched()
    leader.master.stop("switch")
    leader.lead()
    assert table.ensure_loaded() is leader.master
    assert table.state.values == {"a": 7}


def test_snapshots_when_due_by_count_and_by_time(leader):
    table = counters_table(leader, snapshot_every=3, snapshot_interval_ms=60_000)
    table.change([add("a")])
    assert not table.maybe_snapshot()  # 1 event, interval not over
    table.change([add("a"), add("b")])
    assert table.maybe_snapshot()  # 3 events
    assert table.state.events_since_snapshot == 0 and not table.maybe_snapshot()
    leader.clock.advance(61)
    assert table.maybe_snapshot()  # state exists and the interval is over
    leader.dispatched()
    records = leader.store.get_messages(RECORDS.topic, 0, 0, 20).messages
    assert [m.tags for m in records][-2:] == ["snapshot", "snapshot"]
    assert table.replay().values == {"a": 2, "b": 1}


def test_replay_starts_at_the_newest_snapshot(leader, caplog):
    """A new master reads the log back from the newest snapshot only: what precedes it is in
    it. 600 events with a snapshot every 100 (more than one read batch back) replay in at most
    100 + 1 records, to the same state as a replay of everything."""
    table = counters_table(leader, snapshot_every=100, snapshot_interval_ms=3600_000)
    for i in range(650):
        table.change([add(f"k{i % 7}", i)])
        table.maybe_snapshot()
    table.change([{"kind": "note"}])
    leader.dispatched()
    full = Counters()
    for _, event in table._records(0):  # every record, from the queue's start
        full.apply(event)
    with caplog.at_level("INFO"):
        replayed = table.replay()
    assert replayed.values == full.values == table.state.values
    [line] = [r.getMessage() for r in caplog.records if "replayed" in r.getMessage()]
    applied = int(line.split("replayed: ")[1].split(" ")[0])
    assert applied <= 52, line  # the snapshot after event 600, 50 adds and the note


def test_replay_without_a_snapshot_starts_at_the_queue_start(leader):
    table = counters_table(leader, snapshot_every=10_000)
    for i in range(300):
        table.change([add("a")])
    leader.dispatched()
    assert table.replay().values == {"a": 300}


def test_views_are_rewritten_only_when_the_state_changed(leader, tmp_path):
    table = counters_table(leader)
    path = os.path.join(str(tmp_path), "config", "counters.json")
    table.add_view(path, lambda st: {"counters": st.values})
    assert table.persist_views() == 0  # not loaded for a master yet
    table.change([add("a", 4)])
    assert table.persist_views() == 1 and table.persist_views() == 0
    with open(path) as f:
        assert json.load(f) == {"counters": {"a": 4}}


def test_replay_stops_on_a_record_it_cannot_read(leader):
    table = counters_table(leader)
    table.change([add("a")])
    bad = RECORDS.to_message({"kind": "mystery"})
    assert leader.master.put_messages([bad], allow_system_topic=True).status is PutStatus.PUT_OK
    leader.dispatched()
    with pytest.raises(TableRecordError, match="cannot replay rmq_sys_TEST_TABLE"):
        table.replay()


def test_the_service_steps_snapshots_and_views(leader, tmp_path):
    table = counters_table(leader, snapshot_every=1)
    table.add_view(os.path.join(str(tmp_path), "v.json"), lambda st: dict(st.values))
    table.change([add("x")])
    TableService([table]).step()
    assert table.state.events_since_snapshot == 0
    assert os.path.exists(os.path.join(str(tmp_path), "v.json"))


# -- followers ------------------------------------------------------------------------------------
def replicated(leader, *events):
    """Records as a slave gets them: appended to its store (no table involved), not dispatched."""
    result = leader.store.put_messages([RECORDS.to_message(e) for e in events], allow_system_topic=True)
    assert result.status is PutStatus.PUT_OK
    return result


def test_a_follower_applies_what_reput_dispatched_incrementally(leader):
    counters_table(leader).change([add("a", 2)])
    leader.follow()
    table = counters_table(leader, follow=True)
    leader.confirm()
    assert table.current().values == {"a": 2}
    state = table.state
    replicated(leader, add("a"), add("b"))
    assert table.follow().values == {"a": 2}  # not dispatched yet (a slave: not confirmed)
    leader.confirm()
    assert table.follow().values == {"a": 3, "b": 1}
    assert table.state is state and state.version == 3  # applied on top, not rebuilt
    with pytest.raises(NotMaster):
        table.change([add("c")])  # followers never write


def test_a_follower_rebuilds_when_its_log_is_cut_below_what_it_applied(leader):
    leader.follow()
    table = counters_table(leader, follow=True)
    replicated(leader, add("a"))
    diverged = replicated(leader, add("b"), add("c"))
    leader.confirm()
    assert table.follow().values == {"a": 1, "b": 1, "c": 1}
    # truncated to the consistent point, then the new master's records at the same queue
    # offsets: without noticing the cut the follower would keep b and c
    leader.store.truncate(diverged.appends[0].wrote_offset)
    replicated(leader, add("x"), add("y"))
    leader.confirm()
    assert table.follow().values == {"a": 1, "x": 1, "y": 1}
    leader.store.truncate(leader.store.max_phy_offset())  # a cut above what was applied: no rebuild
    state = table.state
    assert table.follow() is state


def test_a_follower_that_becomes_master_replays_and_writes(leader):
    leader.follow()
    table = counters_table(leader, follow=True)
    replicated(leader, add("a", 5))
    leader.confirm()
    assert table.current().values == {"a": 5}
    leader.lead()
    table.state.values["ghost"] = 1  # whatever a follower held, the master replays the log
    assert table.current().values == {"a": 5}
    table.change([add("a")])
    leader.follow()
    leader.confirm()
    assert table.current().values == {"a": 6}


def test_a_table_that_does_not_follow_refuses_reads_on_a_follower(leader):
    table = counters_table(leader)
    table.change([add("a")])
    leader.follow()
    with pytest.raises(NotMaster):
        table.current()


def test_views_on_a_follower_and_never_from_a_table_without_records(leader, tmp_path):
    path = tmp_path / "config" / "counters.json"
    path.parent.mkdir()
    path.write_text('{"old": "file"}')
    leader.follow()
    table = counters_table(leader, follow=True)
    table.add_view(str(path), lambda st: {"counters": st.values})
    assert table.persist_views() == 0 and json.loads(path.read_text()) == {"old": "file"}
    replicated(leader, add("a"))
    leader.confirm()
    assert table.persist_views() == 1 and table.persist_views() == 0
    assert json.loads(path.read_text()) == {"counters": {"a": 1}}


def test_initial_events_are_appended_once_the_first_time_a_node_leads(leader):
    calls = []

    def initial():
        calls.append(1)
        return [add("imported", 3)]

    table = counters_table(leader, initial_events=initial)
    assert table.current().values == {"imported": 3}
    leader.confirm()
    leader.master.stop("again")
    leader.lead()
    other = counters_table(leader, initial_events=initial)  # e.g. after a restart
    assert other.current().values == {"imported": 3} and calls == [1]
    [record] = leader.store.get_messages(RECORDS.topic, 0, 0, 10).messages
    assert record.tags == "add"


def test_refused_initial_events_leave_the_table_unloaded(leader):
    table = counters_table(leader, initial_events=lambda: [add("imported")])
    leader.master.stop("test")
    with pytest.raises(AppendRefused):
        table.ensure_loaded()
    assert table.loaded_for_current_master() is None
    leader.lead()
    assert table.current().values == {"imported": 1}

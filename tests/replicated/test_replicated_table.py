"""The generic replicated table on a real store: append-then-apply, replay, refusals, snapshots,
views, and loading per master role. A tiny counter table is the state under test."""
from __future__ import annotations

import json
import os
from typing import Any

import pytest

from ha.epoch import EpochCache
from master.master_role import MasterRole
from store.broker_role import BrokerRole
from store.clock import ManualClock
from store.config import StoreConfig
from store.message_store import MessageStore
from store.put_result import PutStatus

from cluster.node.node_role import Follower, Leader, NotMaster, Role
from cluster.replicated.replicated_table import AppendRefused, ReplicatedTable, TableService
from cluster.replicated.table_records import TableRecordError, TableRecords

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


class Fixture:
    def __init__(self, root: str) -> None:
        self.clock = ManualClock()
        self.store = MessageStore(StoreConfig(
            store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024,
            mapped_file_size_consume_queue=20 * 256, max_hash_slot_num=64, max_index_num=256),
            clock=self.clock)
        self.store.start()
        self.epochs = EpochCache()
        self.epochs.append(1, 0)
        self.role = Role("broker-a:0")
        self.master = self.lead()

    def lead(self) -> MasterRole:
        master = MasterRole(self.store, self.epochs, "broker-a", self.clock, sync_master=False)
        master.start()
        self.role.set(Leader(BrokerRole.ASYNC_MASTER, self.epochs.last_epoch, master))
        return master

    def table(self, **kw) -> ReplicatedTable[Counters]:
        return ReplicatedTable(RECORDS, Counters, self.role, self.store, self.clock, **kw)

    def dispatched(self) -> None:
        self.store.reput.catch_up()

    def close(self) -> None:
        self.master.stop()
        self.store.shutdown()


@pytest.fixture
def fx(tmp_path):
    f = Fixture(str(tmp_path))
    yield f
    f.close()


def test_change_appends_then_applies_and_replay_rebuilds_the_state(fx):
    table = fx.table()
    before = fx.store.max_phy_offset()
    assert table.change([add("a"), add("b", 5)]).status is PutStatus.PUT_OK
    assert table.change([add("a", 2)]).status is PutStatus.PUT_OK
    assert table.state.values == {"a": 3, "b": 5}
    assert fx.store.max_phy_offset() > before
    fx.dispatched()
    replayed = table.replay()
    assert replayed.values == table.state.values and replayed.version == 3
    tags = [m.tags for m in fx.store.get_messages(RECORDS.topic, 0, 0, 10).messages]
    assert tags == ["add", "add", "add"]


def test_a_refused_append_applies_nothing(fx):
    table = fx.table()
    table.ensure_loaded()
    fx.master.stop("test")  # a stopped master refuses appends with SERVICE_NOT_AVAILABLE
    with table.lock, pytest.raises(AppendRefused) as refused:
        table.commit(fx.master, [add("a")])
    assert refused.value.result.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert table.state.values == {} and table.state.version == 0


def test_a_follower_has_no_table(fx):
    table = fx.table()
    fx.role.set(Follower("127.0.0.1:1"))
    with pytest.raises(NotMaster) as e:
        table.change([add("a")])
    assert e.value.master_address == "127.0.0.1:1"
    assert table.loaded_for_current_master() is None and not table.maybe_snapshot()


def test_a_new_master_role_replays_what_the_log_holds(fx):
    table = fx.table()
    table.change([add("a", 7)])
    table.state.values["ghost"] = 1  # memory that never reached the log
    fx.dispatched()
    fx.master.stop("switch")
    fx.epochs.append(2, fx.store.max_phy_offset())
    fx.master = fx.lead()
    assert table.ensure_loaded() is fx.master
    assert table.state.values == {"a": 7}


def test_snapshots_when_due_by_count_and_by_time(fx):
    table = fx.table(snapshot_every=3, snapshot_interval_ms=60_000)
    table.change([add("a")])
    assert not table.maybe_snapshot()  # 1 event, interval not over
    table.change([add("a"), add("b")])
    assert table.maybe_snapshot()  # 3 events
    assert table.state.events_since_snapshot == 0 and not table.maybe_snapshot()
    fx.clock.advance(61)
    assert table.maybe_snapshot()  # state exists and the interval is over
    fx.dispatched()
    records = fx.store.get_messages(RECORDS.topic, 0, 0, 20).messages
    assert [m.tags for m in records][-2:] == ["snapshot", "snapshot"]
    assert table.replay().values == {"a": 2, "b": 1}


def test_views_are_rewritten_only_when_the_state_changed(fx, tmp_path):
    table = fx.table()
    path = os.path.join(str(tmp_path), "config", "counters.json")
    table.add_view(path, lambda st: {"counters": st.values})
    assert table.persist_views() == 0  # not loaded for a master yet
    table.change([add("a", 4)])
    assert table.persist_views() == 1 and table.persist_views() == 0
    with open(path) as f:
        assert json.load(f) == {"counters": {"a": 4}}


def test_replay_stops_on_a_record_it_cannot_read(fx):
    table = fx.table()
    table.change([add("a")])
    bad = RECORDS.to_message({"kind": "mystery"})
    assert fx.master.put_messages([bad], allow_system_topic=True).status is PutStatus.PUT_OK
    fx.dispatched()
    with pytest.raises(TableRecordError, match="cannot replay rmq_sys_TEST_TABLE"):
        table.replay()


def test_the_service_steps_snapshots_and_views(fx, tmp_path):
    table = fx.table(snapshot_every=1)
    table.add_view(os.path.join(str(tmp_path), "v.json"), lambda st: dict(st.values))
    table.change([add("x")])
    TableService([table]).step()
    assert table.state.events_since_snapshot == 0
    assert os.path.exists(os.path.join(str(tmp_path), "v.json"))

"""An append wakes reput when it moves what reput may dispatch, so a waiting consumer is not
left until reput's next idle round (5 ms): a store with no bound wakes it itself; a master
bounds reput by its confirm offset and wakes it when it has no slave (the append moved that
offset), while with slaves their acks move it and wake reput (MasterRole.on_acked). Under
SYNC_FLUSH the flush moves the bound and wakes reput, not the append."""
from __future__ import annotations

import pytest

from master.replication_servicer import MasterConnection
from store.codec import Message
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.support.leader_store import LeaderStore


def count_wakeups(store: MessageStore, monkeypatch) -> list[int]:
    """The real reput's wakeup, counted."""
    calls: list[int] = []
    wakeup = store.reput.wakeup

    def counted() -> None:
        calls.append(1)
        wakeup()
    monkeypatch.setattr(store.reput, "wakeup", counted)
    return calls


@pytest.fixture
def leader(tmp_path):
    ls = LeaderStore(str(tmp_path))
    yield ls
    ls.close()


def test_a_store_without_a_bound_wakes_reput_on_append(tmp_path, monkeypatch):
    store = MessageStore(StoreConfig(store_path_root_dir=str(tmp_path),
                                     mapped_file_size_commit_log=64 * 1024))
    store.start()
    try:
        calls = count_wakeups(store, monkeypatch)
        assert store.put_message(Message("T", b"a")).ok
        assert len(calls) == 1
        store.confirm_offset = 0  # a bound the append does not move: not woken for it
        assert store.put_message(Message("T", b"b")).ok
        assert len(calls) == 1
    finally:
        store.shutdown()


def test_a_master_without_slaves_wakes_reput_on_append(leader, monkeypatch):
    calls = count_wakeups(leader.store, monkeypatch)
    assert leader.master.put_messages([Message("T", b"a")]).ok
    assert len(calls) == 1
    assert leader.store.confirm_offset == leader.store.max_phy_offset()


def test_a_master_with_a_slave_leaves_the_wake_to_its_acks(leader, monkeypatch):
    master = leader.master
    conn = MasterConnection(master, "127.0.0.1:1")
    assert master.add_connection(conn)
    calls = count_wakeups(leader.store, monkeypatch)
    assert master.put_messages([Message("T", b"a")]).ok
    assert calls == []
    master.on_acked()
    assert len(calls) == 1


def test_under_sync_flush_the_flush_wakes_reput_not_the_append(tmp_path, monkeypatch):
    ls = LeaderStore(str(tmp_path), flush_disk_type="SYNC_FLUSH")
    try:
        calls = count_wakeups(ls.store, monkeypatch)
        assert ls.master.put_messages([Message("T", b"a")]).ok  # returns once flushed
        assert len(calls) == 1  # the flush's (MessageStore._on_flushed)
    finally:
        ls.close()

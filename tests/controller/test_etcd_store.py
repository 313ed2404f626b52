"""EtcdStateStore against a real etcd: records round-trip, only changed groups are written,
and a save is refused (LostLeadership, nothing written) without the leader lease or when a
record changed under it."""
from __future__ import annotations

import json

import pytest

from cluster.controller.election import GroupRecord
from cluster.controller.etcd_client import compare_create, put_op
from cluster.controller.etcd_store import EtcdStateStore, LostLeadership, leader_key

PREFIX = "/t"


def lead(client, address: str = "127.0.0.1:1") -> int:
    lease = client.grant(5)
    assert client.txn([compare_create(leader_key(PREFIX), 0)],
                      [put_op(leader_key(PREFIX), address.encode(), lease)]).succeeded
    return lease


def record(name: str, epoch: int) -> GroupRecord:
    return GroupRecord(name, epoch=epoch, master_id=f"{name}:0",
                       sync_state_set=frozenset({f"{name}:0"}), addresses={f"{name}:0": "a:1"})


def test_save_and_load_round_trip_and_only_changed_groups_are_written(etcd):
    client = etcd.client()
    lease = lead(client)
    store = EtcdStateStore(client, PREFIX, lambda: lease)
    assert store.load() == {}
    store.save_group("a", record("a", 1))
    store.save_group("b", record("b", 1))
    b_rev = client.get(store.group_key("b")).mod_revision
    store.save_group("a", record("a", 2))
    store.save_group("b", record("b", 1))
    assert client.get(store.group_key("b")).mod_revision == b_rev  # unchanged: not rewritten
    loaded = EtcdStateStore(client, PREFIX, lambda: lease).load()
    assert loaded["a"].to_json() == record("a", 2).to_json()
    assert json.loads(client.get(b"/t/groups/b").value)["epoch"] == 1


def test_a_stale_revision_is_refused(etcd):
    client = etcd.client()
    lease = lead(client)
    mine, other = (EtcdStateStore(client, PREFIX, lambda: lease) for _ in range(2))
    mine.load()
    other.load()
    other.save_group("a", record("a", 5))
    with pytest.raises(LostLeadership, match="changed in etcd"):
        mine.save_group("a", record("a", 3))
    assert json.loads(client.get(b"/t/groups/a").value)["epoch"] == 5


def test_without_the_leader_lease_nothing_is_written(etcd):
    client = etcd.client()
    old = lead(client, "127.0.0.1:1")
    deposed = EtcdStateStore(client, PREFIX, lambda: old)
    deposed.load()
    deposed.save_group("a", record("a", 1))
    client.revoke(old)  # its lease expired: another controller takes over
    new = lead(client, "127.0.0.1:2")
    successor = EtcdStateStore(client, PREFIX, lambda: new)
    successor.load()
    successor.save_group("a", record("a", 2))
    with pytest.raises(LostLeadership):
        deposed.save_group("b", record("b", 1))  # a group it never wrote: the lease decides
    with pytest.raises(LostLeadership) as e:
        deposed.save_group("a", record("a", 3))
    assert e.value.active_address == "127.0.0.1:2"
    assert "the active one is 127.0.0.1:2" in str(e.value)
    assert json.loads(client.get(b"/t/groups/a").value)["epoch"] == 2
    assert client.get(b"/t/groups/b") is None
    with pytest.raises(LostLeadership):
        EtcdStateStore(client, PREFIX, lambda: 0).save_group("a", record("a", 9))

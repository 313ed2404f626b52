"""The etcd JSON-gateway client against a real etcd: put/range, compare-and-swap transactions,
leases with keepalive and revoke, endpoints tried in turn, typed errors."""
from __future__ import annotations

import time

import pytest

from cluster.controller.etcd_client import (EtcdClient, EtcdError, compare_create, compare_lease,
                                            compare_mod, prefix_end, put_op, range_op)
from tests.support.waiting import free_port


def test_put_and_range_by_key_and_prefix(etcd):
    c = etcd.client()
    rev = c.put(b"/p/a", b"1")
    c.put(b"/p/b", b"\x00\xff")
    c.put(b"/q", b"x")
    kv = c.get(b"/p/a")
    assert kv is not None and kv.value == b"1" and kv.mod_revision == rev
    kvs, revision = c.range(b"/p/", prefix=True)
    assert [(k.key, k.value) for k in kvs] == [(b"/p/a", b"1"), (b"/p/b", b"\x00\xff")]
    assert revision >= rev
    assert c.get(b"/missing") is None


def test_txn_compare_and_swap_on_mod_revision(etcd):
    c = etcd.client()
    first = c.txn([compare_mod(b"/k", 0)], [put_op(b"/k", b"v1")])
    assert first.succeeded
    stale = c.txn([compare_mod(b"/k", 0)], [put_op(b"/k", b"v2")], [range_op(b"/k")])
    assert not stale.succeeded
    assert stale.ranges[0][0].value == b"v1"
    assert c.txn([compare_mod(b"/k", first.revision)], [put_op(b"/k", b"v3")]).succeeded
    assert c.get(b"/k").value == b"v3"


def test_lease_keepalive_revoke_and_expiry(etcd):
    c = etcd.client()
    lease = c.grant(2)
    created = c.txn([compare_create(b"/leader", 0)], [put_op(b"/leader", b"me", lease)])
    assert created.succeeded
    assert c.txn([compare_lease(b"/leader", lease)], [put_op(b"/x", b"1")]).succeeded
    assert not c.txn([compare_lease(b"/leader", lease + 1)], [put_op(b"/x", b"2")]).succeeded
    assert c.keepalive(lease) == 2
    c.revoke(lease)
    assert c.get(b"/leader") is None  # the key went with its lease
    assert c.keepalive(lease) == 0
    c.revoke(lease)  # gone already: not an error
    short = c.grant(2)
    c.put(b"/eph", b"1", short)
    deadline = time.monotonic() + 6
    while c.get(b"/eph") is not None:
        assert time.monotonic() < deadline, "etcd never expired the lease"
        time.sleep(0.1)


def test_a_dead_endpoint_is_skipped_and_errors_name_the_endpoint(etcd):
    dead = f"http://127.0.0.1:{free_port()}"
    c = EtcdClient([dead, etcd.url], timeout_s=0.5)
    c.put(b"/a", b"1")
    assert c.get(b"/a").value == b"1"
    with pytest.raises(EtcdError) as e:
        EtcdClient([dead], timeout_s=0.5).get(b"/a")
    assert dead in str(e.value) and "/v3/kv/range" in str(e.value)
    with pytest.raises(EtcdError) as e:  # a request etcd refuses: a 4xx, not retried
        c.txn([{"key": "@@not base64", "target": "MOD", "mod_revision": "0"}], [])
    assert e.value.code == 3 and "HTTP 400" in str(e.value)


def test_prefix_end():
    assert prefix_end(b"/a/") == b"/a0"
    assert prefix_end(b"a\xff") == b"b"

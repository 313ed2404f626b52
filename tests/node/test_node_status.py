"""A node's status as the Admin API reports it (node_status), on in-process nodes: identity,
role, epochs and store offsets; a master lists its slaves and its in-sync set, a slave names
its master and whether its stream is up."""
from __future__ import annotations

import os

from tests.support.admin import messages
from tests.support.nodes import settle
from tests.support.waiting import wait_until


def test_a_master_lists_its_slave_and_the_slave_names_its_master(nodes):
    master = nodes.start()
    slave = nodes.slave(master)
    assert nodes.admin(master).send(messages("StatusTopic", 20)).status == "PUT_OK"
    end = master.store.max_phy_offset()
    wait_until(lambda: [r.ack_offset for r in master.status().slaves] == [end], 20,
               "the slave's ack at the master's end")
    settle(master, slave)

    m = master.status()
    assert (m.node_id, m.cluster_name, m.broker_name, m.broker_id, m.role, m.address) == \
        ("broker-a:0", "DefaultCluster", "broker-a", 0, "ASYNC_MASTER", master.address)
    assert m.epoch == 1 and [(e.epoch, e.start_offset) for e in m.epochs] == [(1, 0)]
    assert (m.min_offset, m.max_offset, m.dispatched_offset) == (0, end, end) and end > 0
    assert m.flushed_offset == master.store.flushed_offset
    assert m.writable and not m.not_writable_reason
    assert m.pid == os.getpid() and m.store_path == master.config.store.store_path_root_dir
    [row] = m.slaves
    assert (row.node_id, row.ack_offset, row.lag_bytes, row.in_sync) == ("broker-a:1", end, 0, True)
    assert row.peer and row.last_caught_up_age_ms >= 0
    assert list(m.in_sync_set) == ["broker-a:1"]
    assert (m.master_address, m.master_connected, m.replication_error) == ("", False, "")

    s = slave.status()
    assert (s.node_id, s.broker_id, s.role, s.address) == ("broker-a:1", 1, "SLAVE", slave.address)
    assert (s.master_address, s.master_connected, s.replication_error) == (master.address, True, "")
    assert s.max_offset == end and not s.slaves and not s.in_sync_set
    assert s.store_path == slave.config.store.store_path_root_dir


def test_a_promoted_slave_reports_the_next_epoch_and_no_master(nodes):
    master = nodes.start()
    slave = nodes.slave(master)
    assert nodes.admin(master).send(messages("StatusTopic", 5)).status == "PUT_OK"
    end = master.store.max_phy_offset()
    wait_until(lambda: slave.store.max_phy_offset() == end, 20, "replicated")
    nodes.stop(master)
    slave.switch_role("ASYNC_MASTER")
    s = slave.status()
    assert s.role == "ASYNC_MASTER" and s.epoch == 2
    assert [(e.epoch, e.start_offset) for e in s.epochs] == [(1, 0), (2, end)]
    assert (s.master_address, list(s.slaves), list(s.in_sync_set)) == ("", [], [])

"""Automatic failover with a real controller process and real node processes killed by pid: an
in-sync slave takes over with no acknowledged write lost, the old master rejoins as a slave
without a config change, planned switches, no unclean election, and the write lease."""
from __future__ import annotations

import time

import grpc
import pytest

from proto import admin_pb2 as pb
from tests.integration.harness import (TOKEN, Group, NodeProcess, messages, opened_store,
                                       wait_until)
from cluster.client.admin_client import AdminClient


@pytest.fixture
def group(tmp_path):
    g = Group(str(tmp_path))
    yield g
    g.close()


def start_group(group: Group, role: str = "SYNC_MASTER", slaves: int = 2):
    controller = group.controller()
    master = group.controlled(controller, "node0", 0, preferred_role=role)
    others = [group.controlled(controller, f"node{i}", i) for i in range(1, slaves + 1)]
    wait_until(lambda: master.status().role == role, 20, "the configured master elected")
    wait_until(lambda: len(master.status().in_sync_set) == slaves, 20, "the slaves in sync")
    wait_until(lambda: len(controller.group().sync_state_set) == slaves + 1, 20,
               "the controller's sync state set complete")
    return controller, master, others


def current_master(nodes: list[NodeProcess]) -> NodeProcess | None:
    best = None
    for node in nodes:
        if not node.alive():
            continue
        try:
            st = node.status()
        except grpc.RpcError:
            continue
        if st.role in ("ASYNC_MASTER", "SYNC_MASTER") and (best is None or st.epoch > best[0]):
            best = (st.epoch, node)
    return best[1] if best else None


def send_until_ok(nodes: list[NodeProcess], batch: list[pb.Message], timeout: float) -> NodeProcess:
    """Send `batch` to whichever node is master until one answers PUT_OK; that node."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        master = current_master(nodes)
        if master is not None:
            try:
                if master.admin().send(batch).status == "PUT_OK":
                    return master
            except grpc.RpcError:
                pass
        time.sleep(0.05)
    raise AssertionError("no master acknowledged a write in time")


def bodies_in(store_dir: str, topic: str, queues: int = 4) -> set[bytes]:
    with opened_store(store_dir) as store:
        store.reput.catch_up()
        out = set()
        for q in range(queues):
            offset = store.min_offset_in_queue(topic, q)
            while True:
                got = store.get_messages(topic, q, offset, 256).messages
                if not got:
                    break
                out.update(bytes(m.body) for m in got)
                offset = got[-1].queue_offset + 1
    return out


def test_kill_master_elects_an_in_sync_slave_and_the_old_master_rejoins(group):
    controller, master, (s1, s2) = start_group(group)
    nodes = [master, s1, s2]
    acked: list[pb.Message] = []
    for i in range(10):
        batch = messages("T", 20, start=i * 20)
        assert master.admin().send(batch).status == "PUT_OK"
        acked += batch
    master.kill()
    killed_at = time.monotonic()
    batch = messages("T", 20, start=200)
    new_master = send_until_ok(nodes, batch, timeout=20)
    recovery_s = time.monotonic() - killed_at
    acked += batch
    assert new_master in (s1, s2) and recovery_s < 10, recovery_s
    g = controller.group()
    assert g.master_id == new_master.status().node_id and g.epoch == 2
    assert "no heartbeat from master broker-a:0" in g.elections[0].reason
    # the old master comes back with its unchanged config (brokerId 0, brokerRole SYNC_MASTER)
    master.start()
    wait_until(lambda: master.status().role == "SLAVE"
               and master.status().master_address == new_master.address, 20,
               "the old master following the new one")
    wait_until(lambda: len(new_master.status().in_sync_set) == 2, 20, "both slaves in sync")
    end = new_master.status().max_offset
    wait_until(lambda: all(n.status().max_offset == end for n in nodes), 20, "converged")
    want = {bytes(m.body) for m in acked}
    for node in nodes:
        node.stop()
        assert want <= bodies_in(node.store_dir, "T"), node.name  # nothing acknowledged lost


def test_planned_switch_and_no_hand_switch_under_a_controller(group):
    controller, master, (s1, s2) = start_group(group)
    with controller.client() as c:
        with pytest.raises(grpc.RpcError) as refused:
            c.switch_master("broker-a", "broker-a:9")
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        view = c.switch_master("broker-a", s2.status().node_id)
    assert view.master_id == "broker-a:2" and view.epoch == 2
    wait_until(lambda: s2.status().role == "SYNC_MASTER" and master.status().role == "SLAVE",
               20, "the switch carried out")
    with pytest.raises(grpc.RpcError) as by_hand:
        s1.admin().switch_role("ASYNC_MASTER")
    assert by_hand.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "controller" in by_hand.value.details()
    wait_until(lambda: len(s2.status().in_sync_set) == 2, 20, "both slaves following s2")
    assert s2.admin().send(messages("T", 5)).status == "PUT_OK"


def test_without_an_in_sync_slave_the_group_refuses_writes_and_says_why(group):
    controller, master, (s1,) = start_group(group, slaves=1)
    s1.kill()  # the slave goes away: after 1.5 s it leaves the sync state set
    wait_until(lambda: controller.group().sync_state_set == ["broker-a:0"], 20,
               "the slave dropped from the sync state set")
    master.kill()
    s1.start()  # back, but it may miss acknowledged writes: it must not be elected
    time.sleep(3)  # longer than the failover timeout (2 s)
    g = controller.group()
    assert g.master_id == "broker-a:0" and g.epoch == 1  # nobody elected
    assert "refuses writes" in g.note
    assert s1.status().role == "TRANSITIONING" or s1.status().role == "SLAVE"
    with AdminClient(s1.address, TOKEN) as c:
        with pytest.raises(grpc.RpcError):
            c.send(messages("T", 1))


def test_an_async_master_that_loses_the_controller_stops_acknowledging(group):
    controller, master, _ = start_group(group, role="ASYNC_MASTER", slaves=1)
    assert master.admin().send(messages("T", 1)).status == "PUT_OK"
    controller.pause()  # the master hears nothing: its 1.2 s lease runs out
    try:
        time.sleep(1.6)
        r = master.admin().send(messages("T", 1, start=1))
        assert r.status == "SERVICE_NOT_AVAILABLE" and "controller" in r.reason, r
        assert not master.status().write_lease_valid
    finally:
        controller.resume()
    wait_until(lambda: master.admin().send(messages("T", 1, start=2)).status == "PUT_OK", 10,
               "writes again once the controller answers")
    assert controller.group().epoch == 1  # the pause was the controller's: no failover


def test_restart_everything_at_once_keeps_every_acknowledged_write(group):
    controller, master, (s1, s2) = start_group(group)
    acked = messages("T", 50)
    assert master.admin().send(acked).status == "PUT_OK"
    nodes = [master, s1, s2]
    for proc in (controller, *nodes):
        proc.kill()
    for proc in (controller, *nodes):
        proc.start()
    leader = None

    def elected() -> bool:
        nonlocal leader
        leader = current_master(nodes)
        return leader is not None
    wait_until(elected, 30, "a master after the restart")
    assert controller.group().epoch >= 2  # a new term: no epoch reused
    assert leader.admin().send(messages("T", 5, start=50)).status == "PUT_OK" or \
        send_until_ok(nodes, messages("T", 5, start=50), 20)
    leader.stop()
    assert {bytes(m.body) for m in acked} <= bodies_in(leader.store_dir, "T")

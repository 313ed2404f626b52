"""Controllers sharing their state in a real etcd, as real processes killed and paused by pid,
heartbeated by fake nodes over gRPC: one is active, the standby refuses naming it and takes
over when it dies with the epoch going on; a controller paused past its lease and resumed
cannot hand out anything (its writes are refused, the epoch never goes back). Then three real
nodes (controllerAddr=a;b): killing the active controller changes no master (same master, same
epoch, writes go on); killing it and the master together, the standby elects an in-sync slave
in epoch+1."""
from __future__ import annotations

import json
import time

import grpc
import pytest

from cluster.security.member_gate import MemberCredentials
from cluster.security.member_proof import CONTROLLER_HEARTBEAT
from proto import controller_pb2 as cpb
from proto import controller_pb2_grpc as cpb_grpc
from tests.integration.harness import (CLUSTER_SECRET, ControllerProcess, Group, NodeProcess,
                                       messages, wait_until)

PREFIX = "/t"


@pytest.fixture
def group(tmp_path):
    g = Group(str(tmp_path))
    yield g
    g.close()


def etcd_controller(group: Group, etcd, name: str) -> ControllerProcess:
    node = ControllerProcess(group.root, name, {
        "controllerEtcdEndpoints": etcd.url, "controllerEtcdPrefix": PREFIX,
        "controllerEtcdLeaseSeconds": "2"})
    group.add(node)
    return node.start()


def active_address(etcd) -> str:
    kv = etcd.client().get(f"{PREFIX}/leader".encode())
    return kv.value.decode() if kv is not None else ""


def recorded_epoch(etcd, broker: str = "g") -> int:
    kv = etcd.client().get(f"{PREFIX}/groups/{broker}".encode())
    return json.loads(kv.value)["epoch"] if kv is not None else 0


class FakeNode:
    """A node that only heartbeats: it takes the role and epoch each answer gives it."""

    def __init__(self, node_id: str, peers: tuple[str, ...] = (), master: bool = False) -> None:
        self.node_id = node_id
        self.peers = peers
        self.preferred = "SYNC_MASTER" if master else "SLAVE"
        self.role, self.epoch = "TRANSITIONING", 0

    def beat(self, address: str) -> cpb.Assignment:
        in_sync = self.peers if self.role == "SYNC_MASTER" else ()
        hb = cpb.NodeHeartbeat(broker_name="g", node_id=self.node_id, address=self.node_id,
                               role=self.role, epoch=self.epoch, healthy=True,
                               in_sync=list(in_sync), preferred_role=self.preferred)
        with grpc.insecure_channel(address) as channel:
            proof = MemberCredentials(CLUSTER_SECRET.encode(), self.node_id).metadata(
                channel, CONTROLLER_HEARTBEAT, timeout=2)
            answer = cpb_grpc.ControllerStub(channel).Heartbeat(hb, timeout=2, metadata=proof)
        if answer.role:
            self.role, self.epoch = answer.role, answer.epoch
        return answer


def beat_all(nodes: list[FakeNode], address: str) -> bool:
    """One heartbeat of each node to `address`; False if the controller did not answer."""
    try:
        for node in nodes:
            node.beat(address)
        return True
    except grpc.RpcError:
        return False


def elected_n0(a: ControllerProcess, b: ControllerProcess, etcd):
    wait_until(lambda: active_address(etcd) in (a.address, b.address), 10, "an active controller")
    active, standby = (a, b) if active_address(etcd) == a.address else (b, a)
    n0, n1 = FakeNode("n0", ("n1",), master=True), FakeNode("n1")
    wait_until(lambda: beat_all([n0, n1], active.address) and n0.role == "SYNC_MASTER"
               and recorded_epoch(etcd) == 1, 10, "n0 elected in epoch 1")
    return active, standby, n0, n1


def test_the_standby_refuses_then_takes_over_without_a_master_change(group, etcd):
    a, b = etcd_controller(group, etcd, "ctl-a"), etcd_controller(group, etcd, "ctl-b")
    active, standby, n0, n1 = elected_n0(a, b, etcd)
    with pytest.raises(grpc.RpcError) as e:
        n1.beat(standby.address)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"the active one is {active.address}" in e.value.details()
    active.kill()
    started = time.monotonic()
    wait_until(lambda: beat_all([n0, n1], standby.address), 8, "the standby answering")
    took = time.monotonic() - started
    assert took < 5, f"the standby took {took:.1f} s"
    for _ in range(15):  # 3 s of heartbeats: the master stays, in its epoch
        assert beat_all([n0, n1], standby.address)
        time.sleep(0.2)
    assert (n0.role, n0.epoch, n1.role, recorded_epoch(etcd)) == ("SYNC_MASTER", 1, "SLAVE", 1)
    # The master dies too: the new active controller elects the in-sync slave, epoch 2.
    wait_until(lambda: beat_all([n1], standby.address) and n1.role == "SYNC_MASTER", 10,
               "n1 elected")
    assert n1.epoch == 2 == recorded_epoch(etcd)


def test_a_controller_paused_past_its_lease_cannot_answer_or_write(group, etcd):
    a, b = etcd_controller(group, etcd, "ctl-a"), etcd_controller(group, etcd, "ctl-b")
    active, standby, n0, n1 = elected_n0(a, b, etcd)
    active.pause()
    try:
        wait_until(lambda: beat_all([n0, n1], standby.address), 8, "the standby taking over")
        wait_until(lambda: beat_all([n1], standby.address) and n1.role == "SYNC_MASTER", 10,
                   "n1 elected by the new active controller")
        assert recorded_epoch(etcd) == 2
    finally:
        active.resume()
    # Resumed, its monotonic clock says its lease is long over: it refuses at once.
    with pytest.raises(grpc.RpcError) as e:
        FakeNode("n0", ("n1",), master=True).beat(active.address)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:  # and nothing it does sets the epoch back
        assert recorded_epoch(etcd) == 2
        assert active_address(etcd) == standby.address
        time.sleep(0.1)
    with pytest.raises(grpc.RpcError) as e:
        n0.beat(active.address)
    assert f"the active one is {standby.address}" in e.value.details()


# -- with real nodes ---------------------------------------------------------------------------
def start_cluster(group: Group, etcd):
    a, b = etcd_controller(group, etcd, "ctl-a"), etcd_controller(group, etcd, "ctl-b")
    both = f"{a.address};{b.address}"
    master = group.controlled(a, "node0", 0, preferred_role="SYNC_MASTER", controllerAddr=both)
    slaves = [group.controlled(a, f"node{i}", i, controllerAddr=both) for i in (1, 2)]
    wait_until(lambda: master.status().role == "SYNC_MASTER", 20, "the configured master elected")
    wait_until(lambda: len(master.status().in_sync_set) == 2, 20, "the slaves in sync")
    active, standby = (a, b) if active_address(etcd) == a.address else (b, a)
    wait_until(lambda: len(active.group().sync_state_set) == 3, 20, "the sync state set complete")
    return active, standby, master, slaves


def masters(nodes: list[NodeProcess]) -> list[tuple[str, int]]:
    out = []
    for node in nodes:
        if node.alive():
            try:
                st = node.status()
            except grpc.RpcError:
                continue
            if st.role in ("SYNC_MASTER", "ASYNC_MASTER"):
                out.append((node.name, st.epoch))
    return out


def send_ok(node: NodeProcess, start: int) -> bool:
    try:
        return node.admin().send(messages("T", 5, start)).status == "PUT_OK"
    except grpc.RpcError:
        return False


def test_killing_the_active_controller_changes_no_master(group, etcd):
    active, standby, master, slaves = start_cluster(group, etcd)
    epoch = master.status().epoch
    active.kill()
    wait_until(lambda: active_address(etcd) == standby.address, 8, "the standby active")
    wait_until(lambda: standby.group() is not None and
               len(standby.group().sync_state_set) == 3, 10, "the nodes reporting to it")
    deadline = time.monotonic() + 3  # past the failover timeout of the new controller
    while time.monotonic() < deadline:
        assert masters([master, *slaves]) == [("node0", epoch)]
        assert send_ok(master, 100)
        time.sleep(0.2)
    assert standby.group().epoch == epoch and standby.group().master_id.endswith(":0")
    assert master.status().controller == standby.address


def test_killing_the_active_controller_and_the_master_elects_an_in_sync_slave(group, etcd):
    active, standby, master, slaves = start_cluster(group, etcd)
    epoch = master.status().epoch
    assert send_ok(master, 0)
    active.kill()
    master.kill()
    wait_until(lambda: len(masters(slaves)) == 1, 20, "a slave elected by the standby")
    (name, new_epoch), = masters(slaves)
    assert new_epoch == epoch + 1 == standby.group().epoch
    new_master = next(s for s in slaves if s.name == name)
    wait_until(lambda: send_ok(new_master, 200), 10, "writes on the new master")

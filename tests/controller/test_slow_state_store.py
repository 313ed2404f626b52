"""A slow state store holds back only the group whose change it is saving (issue 49: the
controller's own waits). The controller service takes one lock per group and saves each
group's record under that group's lock alone, so while etcd takes seconds to write one group's
new record (a real etcd behind a delaying proxy), another group's heartbeats are answered.
With one lock for every group (the design before), the other group's answer waited for the
save: the test checks the order of events, not a duration."""
from __future__ import annotations

import threading

from cluster.controller.controller_service import ControllerService, FileStateStore
from cluster.controller.election import ElectionConfig, GroupRecord, NodeReport
from cluster.controller.etcd_client import EtcdClient
from cluster.controller.etcd_store import EtcdStateStore
from cluster.drills.delay_proxy import DelayProxy
from common.clock import ManualClock
from tests.controller.test_etcd_store import PREFIX, lead

CONFIG = ElectionConfig(failover_timeout_ms=3000, lease_ms=2000, settle_ms=0)


def report(node: str, **kw) -> NodeReport:
    return NodeReport(node_id=node, address=f"127.0.0.1:{10911 + int(node[-1])}", **kw)


def test_a_slow_save_of_one_group_does_not_hold_back_another_groups_answers(etcd):
    lease = lead(etcd.client())
    host, port = etcd.url.removeprefix("http://").split(":")
    proxy = DelayProxy((host, int(port))).start()
    try:
        client = EtcdClient([f"http://127.0.0.1:{proxy.port}"], timeout_s=30.0)
        service = ControllerService(EtcdStateStore(client, PREFIX, lambda: lease), CONFIG,
                                    ManualClock())
        b = report("broker-b:0", role="TRANSITIONING", preferred_role="SYNC_MASTER")
        assert service.heartbeat("broker-b", b).role.name == "SYNC_MASTER"  # elected, saved
        b_master = report("broker-b:0", role="SYNC_MASTER", epoch=1)
        service.heartbeat("broker-b", b_master)

        proxy.delay_s = 1.5  # every etcd call now takes 3 s or more
        saved = threading.Event()

        def first_heartbeat_of_group_a() -> None:
            service.heartbeat("broker-a", report("broker-a:0", role="TRANSITIONING",
                                                 preferred_role="SYNC_MASTER"))
            saved.set()  # a new group's election is saved before it is answered

        a = threading.Thread(target=first_heartbeat_of_group_a)
        a.start()
        try:
            answer = service.heartbeat("broker-b", b_master)  # nothing to save
            assert answer.role.name == "SYNC_MASTER" and answer.epoch == 1
            assert not saved.is_set(), "broker-b's answer waited for broker-a's save"
        finally:
            a.join(60)
        assert saved.is_set()
        assert {s.record.broker_name: s.record.epoch for s in service.snapshots()} == {
            "broker-a": 1, "broker-b": 1}
    finally:
        proxy.close()


def test_the_state_file_keeps_every_group_whoever_saves_first(tmp_path):
    """FileStateStore writes one file for all groups: a save before any load (a new store
    object on an existing file) keeps the groups it did not save."""
    path = str(tmp_path / "controller.json")
    first = FileStateStore(path)
    first.save_group("broker-a", GroupRecord("broker-a", epoch=3))
    first.save_group("broker-b", GroupRecord("broker-b", epoch=5))
    FileStateStore(path).save_group("broker-a", GroupRecord("broker-a", epoch=4))
    assert {n: r.epoch for n, r in FileStateStore(path).load().items()} == {
        "broker-a": 4, "broker-b": 5}

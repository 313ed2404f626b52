"""Leadership over a real etcd, stepped by hand with manual clocks: one of two controllers
wins, the standby names it and takes over when its lease is gone, reloading the state fresh;
a deposed controller that still believes it leads cannot write an older epoch."""
from __future__ import annotations

import pytest

from cluster.controller.active_gate import NotActiveController
from cluster.controller.controller_service import ControllerService
from cluster.controller.election import ElectionConfig, NodeReport
from cluster.controller.etcd_store import EtcdStateStore
from cluster.controller.leadership import Leadership, LeadershipConfig
from store.broker_role import BrokerRole
from common.clock import ManualClock

PREFIX = "/rmq"
CONFIG = ElectionConfig(failover_timeout_ms=3000, lease_ms=2000, settle_ms=0)


class Controller:
    """A controller's parts without gRPC: leadership, store and service on one manual clock."""

    def __init__(self, etcd, address: str) -> None:
        self.clock = ManualClock()
        client = etcd.client()
        self.leadership = Leadership(client, LeadershipConfig(PREFIX, address, 2), self.clock)
        self.store = EtcdStateStore(client, PREFIX, self.leadership.current_lease)
        self.service = ControllerService(self.store, CONFIG, self.clock, gate=self.leadership)
        self.leadership.on_elected = self.service.reload

    def run(self, seconds: float, *slaves: str) -> None:
        """Let `seconds` pass on this controller's clock, its leadership stepping and `slaves`
        heartbeating meanwhile."""
        for _ in range(int(seconds / 0.25)):
            self.clock.advance(0.25)
            self.leadership.step()
            for node in slaves:
                self.beat(node)

    def beat(self, node: str, role: str = "SLAVE", epoch: int = 0, in_sync=frozenset()):
        return self.service.heartbeat("g", NodeReport(node, f"{node}-addr", role, epoch,
                                                      in_sync=frozenset(in_sync),
                                                      preferred_role="SYNC_MASTER"
                                                      if node == "n0" else ""))


def test_one_wins_the_standby_refuses_naming_it_and_takes_over_with_the_epoch(etcd):
    a, b = Controller(etcd, "10.0.0.1:1"), Controller(etcd, "10.0.0.2:1")
    a.leadership.step()
    b.leadership.step()
    assert a.leadership.is_active and not b.leadership.is_active
    with pytest.raises(NotActiveController, match="the active one is 10.0.0.1:1"):
        b.beat("n0")
    assert a.beat("n0").role == BrokerRole.SYNC_MASTER
    a.beat("n1")
    epoch = a.beat("n0", "SYNC_MASTER", 1, {"n1"}).epoch
    assert epoch == 1
    a.leadership.resign()  # as on a clean stop; a crash ends the same way after the TTL
    b.clock.advance(0.5)  # the standby's next poll
    b.leadership.step()
    assert b.leadership.is_active
    # Reloaded fresh: the master is not failed over before it could report...
    assert b.beat("n1").master_id == "n0"
    b.run(2.0)
    answer = b.beat("n0", "SYNC_MASTER", 1, {"n1"})
    assert (answer.role, answer.epoch) == (BrokerRole.SYNC_MASTER, 1)  # no master change
    b.run(3.5, "n1")  # ...and a silent one is, with the epoch continuing
    assert (b.beat("n1").role, b.beat("n1").epoch) == (BrokerRole.SYNC_MASTER, 2)


def test_a_deposed_controller_that_still_believes_it_leads_cannot_write(etcd):
    a, b = Controller(etcd, "10.0.0.1:1"), Controller(etcd, "10.0.0.2:1")
    a.leadership.step()
    a.beat("n0")
    a.beat("n1")
    a.beat("n0", "SYNC_MASTER", 1, {"n1"})
    # a's lease ends in etcd while a is not looking (paused): a's clock did not move, so a
    # still counts itself active; b takes over and elects n1 in epoch 2.
    etcd.client().revoke(a.leadership.current_lease())
    b.leadership.step()  # its first poll
    b.run(3.5, "n1")
    assert b.beat("n1").epoch == 2
    # a, its clock still inside its lease, is asked to switch to n1: epoch 2 again, refused
    # by etcd's compare; a steps down and says who leads.
    with pytest.raises(NotActiveController, match="the active one is 10.0.0.2:1"):
        a.service.switch_master("g", "n1")
    assert not a.leadership.is_active
    with pytest.raises(NotActiveController, match="the active one is 10.0.0.2:1"):
        a.beat("n0", "SYNC_MASTER", 1, {"n1"})
    assert b.store.load()["g"].epoch == 2 and b.store.load()["g"].master_id == "n1"


def test_the_lease_runs_out_locally_without_keepalives(etcd):
    a = Controller(etcd, "10.0.0.1:1")
    a.leadership.step()
    assert a.leadership.is_active
    a.clock.advance(0.7)
    a.leadership.step()  # a keepalive (a third of the TTL) renews from its send time
    a.clock.advance(1.9)
    assert a.leadership.is_active
    a.clock.advance(0.2)  # 2 s after the last keepalive was sent: not surely ours any more
    with pytest.raises(NotActiveController):
        a.beat("n0")

"""Which of several controllers sharing their state in etcd is the active one: the holder of
the key `<prefix>/leader`, created with a lease only when absent (a txn on create_revision == 0)
and holding the holder's advertised address.

- Standby: every `poll_s` it reads the key; when the key is gone (its holder's lease expired
  or was revoked) it grants itself a lease and tries the create. Winning, it reloads the
  state from etcd (`on_elected`, the controller service's restart path: every group fresh, so
  the settle window applies and no master is failed over before its heartbeats arrive) before
  answering anything.
- Active: a keepalive every third of the TTL. The lease counts as ours until the send time of
  the last successful keepalive (or of the grant) plus the TTL: etcd starts its countdown
  later than we do, so this controller stops answering before etcd can give the key to a
  standby, also after a pause (SIGSTOP, a stall): the monotonic clock ran on meanwhile. A
  keepalive that finds the lease gone, or no keepalive within the TTL, ends the leadership.
- `step_down` (the store's compare failed) ends it at once; the lease is revoked on the next
  step, so a standby can take over without waiting for the TTL.

The TTL (`controllerEtcdLeaseSeconds`, 3 by default) is the controllers' failover time: a
standby takes over within TTL + poll_s after the active one dies. 3 s is about a master's
failover timeout, above etcd's own minimum lease (1.5 s with its default election timeout)
and leaves room for two missed keepalives before the lease is lost.

`step()` does one round with the injected clock (tests drive it); `LeadershipThread` runs it.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

from common.clock import Clock
from common.service import PeriodicTask

from cluster.controller.active_gate import NotActiveController
from cluster.controller.etcd_client import (EtcdClient, EtcdError, compare_create, put_op,
                                            range_op)
from cluster.controller.etcd_store import leader_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeadershipConfig:
    """The leader key's settings: the cluster's key prefix, the address this controller
    writes into the key, and the lease's TTL (keepalives every third of it)."""

    prefix: str
    address: str  # the advertised address, written into the leader key for nodes to find
    ttl_s: int = 3

    def __post_init__(self) -> None:
        if not 2 <= self.ttl_s <= 60:
            raise ValueError(f"the leader lease must be 2..60 s, got {self.ttl_s}")
        if not self.address:
            raise ValueError("a controller in etcd needs its advertised address")

    @property
    def keepalive_s(self) -> float:
        return self.ttl_s / 3.0

    @property
    def poll_s(self) -> float:
        return min(0.5, self.keepalive_s)


class Leadership:
    """Owns this controller's claim on the leader key: its lease, until when the lease is surely
    ours, and the last known leader's address. `_lock` guards those (the controller service
    asks from gRPC threads; step() runs on the leadership thread). No call out (etcd,
    on_elected) is made under `_lock`."""

    def __init__(self, client: EtcdClient, config: LeadershipConfig, clock: Clock,
                 on_elected: Callable[[], None] = lambda: None) -> None:
        self.client = client
        self.config = config
        self.clock = clock
        self.on_elected = on_elected  # set by the controller process: the service's reload
        self.key = leader_key(config.prefix)
        self._lock = threading.Lock()
        self._lease = 0
        self._valid_until = 0.0
        self._leader_address = ""
        self._to_revoke = 0
        self._next_round = 0.0  # monotonic time of the next keepalive or poll
        self._unreachable = False  # logged once per outage

    # -- the gate (active_gate.ActiveGate) ----------------------------------------------------
    def check_active(self) -> None:
        with self._lock:
            if self._lease and self.clock.monotonic() < self._valid_until:
                return
            active = "" if self._leader_address == self.config.address else self._leader_address
        raise NotActiveController(active)

    def step_down(self, why: str, active_address: str = "") -> None:
        with self._lock:
            lease, self._lease = self._lease, 0
            if lease:
                self._to_revoke, self._next_round = lease, 0.0
                self._leader_address = active_address
        if lease:
            log.warning("no longer the active controller: %s", why)

    def current_lease(self) -> int:
        """The lease while it is surely ours, else 0 (EtcdStateStore's fence)."""
        with self._lock:
            valid = self._lease and self.clock.monotonic() < self._valid_until
            return self._lease if valid else 0

    @property
    def is_active(self) -> bool:
        return self.current_lease() != 0

    @property
    def leader_address(self) -> str:
        with self._lock:
            return self._leader_address

    # -- rounds -------------------------------------------------------------------------------
    def step(self) -> None:
        now = self.clock.monotonic()
        with self._lock:
            lease, to_revoke, due = self._lease, self._to_revoke, now >= self._next_round
            self._to_revoke = 0
        try:
            if to_revoke:
                self.client.revoke(to_revoke)
            if due and lease:
                self._renew(lease, now)
            elif due:
                self._campaign(now)
            self._unreachable = False
        except EtcdError as e:
            if not self._unreachable:
                log.warning("etcd: %s", e)
            self._unreachable = True
            with self._lock:
                self._to_revoke = self._to_revoke or to_revoke
        if lease and not self.is_active:
            self.step_down("the leader lease ran out before a keepalive succeeded")

    def resign(self) -> None:
        """Give the leadership up now (a clean stop): a standby takes over without waiting."""
        with self._lock:
            lease, self._lease = self._lease, 0
        if lease:
            try:
                self.client.revoke(lease)
            except EtcdError as e:
                log.warning("cannot revoke the leader lease: %s", e)

    def _renew(self, lease: int, now: float) -> None:
        with self._lock:
            self._next_round = now + self.config.poll_s  # retried sooner if it fails
        ttl = self.client.keepalive(lease)
        if ttl <= 0:
            self.step_down("etcd let the leader lease expire")
            return
        with self._lock:
            if self._lease == lease:
                self._valid_until = now + ttl
                self._next_round = now + self.config.keepalive_s

    def _campaign(self, now: float) -> None:
        with self._lock:
            self._next_round = now + self.config.poll_s
        holder = self.client.get(self.key)
        if holder is not None:
            self._set_leader_address(holder.value.decode())
            return
        lease = self.client.grant(self.config.ttl_s)
        address = self.config.address.encode()
        result = self.client.txn([compare_create(self.key, 0)], [put_op(self.key, address, lease)],
                                 [range_op(self.key)])
        if not result.succeeded:  # another controller was quicker
            self.client.revoke(lease)
            if result.ranges and result.ranges[0]:
                self._set_leader_address(result.ranges[0][0].value.decode())
            return
        try:
            self.on_elected()  # reload the state before answering as the active controller
        except Exception as e:  # noqa: BLE001 - whatever failed, this controller must not lead
            log.error("won the leadership but cannot load the state: %s", e)
            self.client.revoke(lease)
            return
        with self._lock:
            self._lease, self._valid_until = lease, now + self.config.ttl_s
            self._leader_address = self.config.address
            self._next_round = now + self.config.keepalive_s
        log.warning("this controller (%s) is now the active one (lease %x)", self.config.address,
                    lease)

    def _set_leader_address(self, address: str) -> None:
        with self._lock:
            changed, self._leader_address = address != self._leader_address, address
        if changed:
            log.info("the active controller is %s", address)


class LeadershipThread(PeriodicTask):
    """Runs `leadership.step()` every TICK_S (each step decides whether a keepalive or a poll
    is due); resigns on stop."""
    TICK_S = 0.05

    def __init__(self, leadership: Leadership) -> None:
        super().__init__("controller-leadership", leadership.step, self.TICK_S)
        self.leadership = leadership

    def on_stop(self) -> None:
        self.leadership.resign()

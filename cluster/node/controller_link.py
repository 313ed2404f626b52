"""A node's line to its controller: a heartbeat every controllerHeartbeatInterval, and each
answer handed to the node, which carries it out (cluster/node/assignment_plan.py decides what
that means). An answer also renews a master's write lease from the moment its heartbeat was
sent (master/write_lease.py), so a master that cannot reach the controller stops on time.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

import grpc

from proto import controller_pb2 as pb
from proto import controller_pb2_grpc as pb_grpc
from store.broker_role import BrokerRole
from store.clock import Clock
from store.service import Service

from cluster.controller.election import Assignment

log = logging.getLogger(__name__)


def assignment_from_pb(a: pb.Assignment) -> Assignment:
    return Assignment(role=BrokerRole.parse(a.role) if a.role else None,
                      master_address=a.master_address, master_id=a.master_id, epoch=a.epoch,
                      sync_state_set=frozenset(a.sync_state_set),
                      sync_state_epoch=a.sync_state_epoch, note=a.note, lease_ms=a.lease_ms)


class ControllerLink(Service):
    """Owns the channel to the controller and what it last said (`_lock` guards the latter:
    status reads it from other threads). The node's callbacks run on this service's thread."""
    name = "controller-link"

    def __init__(self, address: str, interval_ms: int, clock: Clock,
                 report: Callable[[], pb.NodeHeartbeat],
                 apply: Callable[[Assignment, float], None]) -> None:
        super().__init__()
        self.address = address
        self.interval_ms = interval_ms
        self.clock = clock
        self._report = report
        self._apply = apply
        self._channel = grpc.insecure_channel(address)
        self._stub = pb_grpc.ControllerStub(self._channel)
        self._lock = threading.Lock()
        self._last_contact: float | None = None
        self._note = ""

    def step(self) -> None:
        heartbeat = self._report()
        sent_at = self.clock.monotonic()
        try:
            answer = self._stub.Heartbeat(heartbeat, timeout=max(1.0, 2 * self.interval_ms / 1000))
        except grpc.RpcError as e:
            code = e.code().name if hasattr(e, "code") and e.code() else "?"
            detail = e.details() if hasattr(e, "details") else str(e)
            with self._lock:
                first = not self._note.startswith("cannot reach")
                self._note = f"cannot reach the controller at {self.address}: {code}: {detail}"
            if first:
                log.warning("%s", self._note)
            return
        assignment = assignment_from_pb(answer)
        with self._lock:
            if self._note.startswith("cannot reach"):
                log.info("the controller at %s answers again", self.address)
            self._last_contact = self.clock.monotonic()
            self._note = assignment.note
        self._apply(assignment, sent_at)

    def wait_interval(self) -> float:
        return self.interval_ms / 1000.0

    def on_stop(self) -> None:
        self._channel.close()

    def contact_age_ms(self) -> int:
        with self._lock:
            if self._last_contact is None:
                return -1
            return int((self.clock.monotonic() - self._last_contact) * 1000)

    @property
    def note(self) -> str:
        with self._lock:
            return self._note

"""A node's line to its controller: a heartbeat every controllerHeartbeatInterval, and each
answer handed to the node, which carries it out (cluster/assembly/assignment_plan.py decides what
that means). An answer also renews a master's write lease from the moment its heartbeat was
sent (master/write_lease.py), so a master that cannot reach the controller stops on time.

Several controllers (`controllerAddr=a:p;b:p`, controllers sharing their state in etcd): only
the active one answers; a standby refuses with FAILED_PRECONDITION naming the active one. The
link keeps sending to the one that answered last; when it is UNAVAILABLE, too slow or refuses,
the same heartbeat goes to the controller the refusal named, else to the next in the list,
each tried at most once per round (controller_choice.py decides the order). Only an answer
renews the write lease, and only the active controller answers, so a standby never keeps a
deposed master writing.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Sequence

import grpc

from proto import controller_pb2 as pb
from proto import controller_pb2_grpc as pb_grpc
from store.broker_role import BrokerRole
from common.clock import Clock
from common.service import Service

from cluster.controller.election import Assignment
from .controller_choice import ControllerChoice
from cluster.security.member_proof import MembershipRefused
from cluster.security.tls import TlsSettings, open_channel

log = logging.getLogger(__name__)
# A controller that was down reconnects within a second, not gRPC's default backoff (up to
# two minutes): it may be the active one the next time the link comes round to it.
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 200),
                   ("grpc.min_reconnect_backoff_ms", 200),
                   ("grpc.max_reconnect_backoff_ms", 1000)]
MOVE_ON = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION,
           grpc.StatusCode.DEADLINE_EXCEEDED)


def assignment_from_pb(a: pb.Assignment) -> Assignment:
    return Assignment(role=BrokerRole.parse(a.role) if a.role else None,
                      master_address=a.master_address, master_id=a.master_id, epoch=a.epoch,
                      sync_state_set=frozenset(a.sync_state_set),
                      sync_state_epoch=a.sync_state_epoch, note=a.note, lease_ms=a.lease_ms,
                      group_addresses=tuple(a.group_addresses))


class ControllerLink(Service):
    """Owns a channel per controller, which one is current, and what the controllers last said
    (`_lock` guards the latter two: status reads them from other threads). The node's callbacks
    run on this service's thread."""
    name = "controller-link"

    def __init__(self, addresses: list[str] | str, interval_ms: int, clock: Clock,
                 report: Callable[[], pb.NodeHeartbeat],
                 apply: Callable[[Assignment, float], None],
                 credentials: Callable[[grpc.Channel, float], Sequence[tuple[str, str]]],
                 tls: TlsSettings | None = None) -> None:
        super().__init__()
        self.choice = ControllerChoice(addresses.split(";") if isinstance(addresses, str)
                                       else addresses)
        self.interval_ms = interval_ms
        self.clock = clock
        self._report = report
        self._apply = apply
        self._credentials = credentials  # (channel, timeout): proves membership for one beat
        self._channels = {a: open_channel(a, tls, CHANNEL_OPTIONS)
                          for a in self.choice.addresses}
        self._stubs = {a: pb_grpc.ControllerStub(c) for a, c in self._channels.items()}
        self._lock = threading.Lock()
        self._last_contact: float | None = None
        self._note = ""

    @property
    def address(self) -> str:
        """The controller heartbeats go to first (the one that answered last)."""
        with self._lock:
            return self.choice.current

    def step(self) -> None:
        heartbeat = self._report()
        failures: list[str] = []
        for address in self.choice.round():
            sent_at = self.clock.monotonic()  # before the challenge: the lease errs early
            timeout = max(1.0, 2 * self.interval_ms / 1000)
            try:
                # the challenge shares the heartbeat's timeout: a hung controller must not
                # delay moving on to the next one
                metadata = self._credentials(self._channels[address], timeout)
                answer = self._stubs[address].Heartbeat(heartbeat, timeout=timeout,
                                                        metadata=metadata)
            except MembershipRefused as e:  # not a member: the next controller may be one
                failures.append(f"{address}: {e}")
                self.choice.refused(address, "")
                continue
            except grpc.RpcError as e:
                code = e.code() if hasattr(e, "code") else None
                detail = e.details() if hasattr(e, "details") else str(e)
                failures.append(f"{address}: {code.name if code else '?'}: {detail}")
                if code in MOVE_ON:
                    self.choice.refused(address, detail if code is
                                        grpc.StatusCode.FAILED_PRECONDITION else "")
                    continue
                break
            self._answered(address, assignment_from_pb(answer), sent_at)
            return
        with self._lock:
            first = not self._note.startswith("cannot reach")
            self._note = "cannot reach an active controller: " + "; ".join(failures)
        if first:
            log.warning("%s", self._note)

    def _answered(self, address: str, assignment: Assignment, sent_at: float) -> None:
        with self._lock:
            moved = address != self.choice.current
            self.choice.answered(address)
            if self._note.startswith("cannot reach") or moved:
                log.info("the controller at %s answers", address)
            self._last_contact = self.clock.monotonic()
            self._note = assignment.note
        self._apply(assignment, sent_at)

    def wait_interval(self) -> float:
        return self.interval_ms / 1000.0

    def on_stop(self) -> None:
        for channel in self._channels.values():
            channel.close()

    def contact_age_ms(self) -> int:
        with self._lock:
            if self._last_contact is None:
                return -1
            return int((self.clock.monotonic() - self._last_contact) * 1000)

    @property
    def note(self) -> str:
        with self._lock:
            return self._note

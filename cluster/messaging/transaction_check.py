"""The check-back of orphaned transactions (RocketMQ's TransactionalMessageCheckService), run
by the master every transactionCheckInterval.

One round:
  1. catch the transaction table up with the half and op queues (transaction_state.py);
  2. for every open transaction older than its immunity (transactionTimeOut, or the producer's
     CHECK_IMMUNITY_TIME_IN_SECONDS when longer; measured from the store time of its first
     half record, so producer clocks do not matter):
       - checked transactionCheckMax times already: give up, roll back (an op record), log;
       - else, when a producer of its topic has a Telemetry stream open here: append a check
         copy of the half (TRANSACTION_CHECK_TIMES + 1, RocketMQ's putBackHalfMsgQueue) and
         push RecoverOrphanedTransactionCommand {the message as the producer sent it, the
         copy's transaction id} on that stream. The producer's checker answers with
         EndTransaction (source SERVER_CHECK), which resolves the transaction.
       - no producer connected: nothing is written and the check is not counted. A check
         nobody received is not an attempt; counting it would roll back, after 15 rounds of a
         producer outage, transactions that the producer committed locally. (RocketMQ counts
         it; its producers usually reconnect within a round.)

The check count lives in the copies (commitlog), so it survives restarts and failovers. The
service thread runs on every node; a round does nothing unless the node is master, and a node
that becomes master rebuilds the table from its queues first. Tests call `step()` with an
injected clock (`clock`).
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from proto.apache.rocketmq.v2 import service_pb2 as s
from common.clock import Clock
from common.service import Service

from cluster.messaging import transaction_records as tr
from cluster.v2.v2_status import V2Error
from cluster.messaging.telemetry import TelemetryHub

if TYPE_CHECKING:
    from cluster.messaging.transaction import TransactionService
    from cluster.config.live_config import LiveConfig

log = logging.getLogger(__name__)


@dataclass
class CheckRound:
    """What one round did (for tests and logs)."""
    checked: list[int] = field(default_factory=list)  # roots a check was pushed for
    rolled_back: list[int] = field(default_factory=list)  # roots given up on
    waiting: list[int] = field(default_factory=list)  # due, but no producer is connected
    not_due: int = 0


class TransactionChecker(Service):
    """The check-back service of the module docstring: each round, on a master, rolls back
    transactions checked too often and sends the others a check through a producer's
    telemetry stream. Owns no transaction state (TransactionService and its table do) and
    reads its settings from the live config every round.

    `_step_lock` keeps rounds one at a time (the service thread, or a test calling `step`)."""

    name = "transaction-check"

    def __init__(self, service: "TransactionService", hub: TelemetryHub, clock: Clock,
                 config: "LiveConfig") -> None:
        super().__init__()
        self.service = service
        self.hub = hub
        self.clock = clock
        self.live = config  # transactionCheckInterval/TimeOut/CheckMax change at runtime
        self._step_lock = threading.Lock()

    def wait_interval(self) -> float:
        return self.live.current.transaction_check_interval_ms / 1000.0

    def step(self) -> CheckRound:
        with self._step_lock:
            if self.service.role.master is None:
                return CheckRound()
            try:
                return self._round()
            except V2Error as e:  # not writable, the role changed under the round, ...
                log.warning("transaction check round stopped: %s", e.message)
                return CheckRound()

    def _round(self) -> CheckRound:
        config = self.live.current
        timeout_ms = config.transaction_timeout_ms
        check_max = config.transaction_check_max
        self.service.ensure_loaded(refresh=True)
        now = self.clock.now_ms()
        done = CheckRound()
        for half in self.service.open_transactions():
            if now - half.began_ms < max(timeout_ms, half.immunity_ms):
                done.not_due += 1
                continue
            if half.check_times >= check_max:
                if self.service.give_up(half):
                    done.rolled_back.append(half.root)
                continue
            producers = self.hub.producers_of(half.real_topic)
            if not producers:
                done.waiting.append(half.root)
                continue
            renewed = self.service.renew(half)
            if renewed is None:
                continue
            command = s.TelemetryCommand(
                recover_orphaned_transaction_command=s.RecoverOrphanedTransactionCommand(
                    message=tr.half_to_v2(renewed.record), transaction_id=renewed.transaction_id))
            taken = next((stream for stream in producers if stream.push(command)), None)
            if taken is not None:
                done.checked.append(half.root)
                log.info("transaction %d (topic %s): check %d sent as %s to %s", half.root,
                         half.real_topic, half.check_times + 1, renewed.transaction_id,
                         taken.client_id)
            else:
                log.warning("transaction %d: no producer stream of %s took the check", half.root,
                            half.real_topic)
        if done.waiting:
            log.info("%d open transaction(s) due for a check have no producer connected",
                     len(done.waiting))
        return done

"""Which transactions are open, derived from the half and op queues of the local store.

Nothing here is the source of truth: the half queue (RMQ_SYS_TRANS_HALF_TOPIC/0) and the op
queue (RMQ_SYS_TRANS_OP_HALF_TOPIC/0) are, and they replicate with the commitlog. A master
builds this table by reading both queues from their first offsets, then keeps reading from
where it stopped; a node that becomes master builds a fresh one, so checking resumes after a
failover exactly where the replicated records say.

A transaction is named by its root: the half queue offset of its first half record. Every
check-back appends a copy (transaction_records.renewed_half) that names its root, and an op
record may name any copy; marking any copy done closes the whole transaction. Op records can
be read before the half they name (the two queues are read one after the other while writes go
on): such offsets wait in `early_ops` until their half shows up.

Not thread-safe: the transaction service calls it under its lock.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from store.codec import MessageRecord
from store.get_result import GetStatus
from store.message_store import MessageStore

from cluster.messaging import transaction_records as tr

log = logging.getLogger(__name__)
READ_BATCH = 64


@dataclass(frozen=True, slots=True)
class OpenHalf:
    """The newest half record of an open transaction."""
    root: int  # half queue offset of the first half record
    queue_offset: int  # of this copy
    phy_offset: int  # of this copy; its offset msg id is the current transaction id
    check_times: int  # checks sent so far
    began_ms: int  # store time of the first half record (when the transaction began)
    immunity_ms: int  # the producer's own wait before the first check (0: none)
    real_topic: str


class QueueShrank(Exception):
    """A queue is shorter than what was read from it (the log was truncated): rebuild."""


class TransactionTable:
    """The open and resolved transactions read from the half and op queues (the module
    docstring): copies by queue and commitlog offset, each root's newest open copy, how
    resolved roots ended, ops seen before their half, and where each queue was read up to.

    Not thread-safe: TransactionService uses it under its lock."""

    def __init__(self) -> None:
        self.copies: dict[int, int] = {}  # half queue offset -> root
        self.by_phy: dict[int, int] = {}  # half commitlog offset -> half queue offset
        self.open: dict[int, OpenHalf] = {}  # root -> newest copy
        self.resolved: dict[int, str] = {}  # root -> how ("commit", "rollback", "" when rebuilt)
        self.latest: dict[int, int] = {}  # root -> newest copy's queue offset (for pruning)
        self.early_ops: set[int] = set()
        self.half_next: int | None = None  # next half queue offset to read
        self.op_next: int | None = None
        self.pruned_below = 0

    # -- learning -----------------------------------------------------------------------------
    def add_half(self, record: MessageRecord) -> None:
        """A half record read from the half queue or just appended by this master."""
        qo = record.queue_offset
        if qo in self.copies:
            return
        root = tr.root_of(record)
        if root > qo:
            log.warning("half record %d names a later root %d: treated as its own root", qo, root)
            root = qo
        self.copies[qo] = root
        self.by_phy[record.physical_offset] = qo
        self.latest[root] = max(qo, self.latest.get(root, qo))
        if root in self.resolved:
            return
        if qo in self.early_ops:
            self.early_ops.discard(qo)
            self.resolve(root, "")
            return
        current = self.open.get(root)
        if current is not None and current.queue_offset > qo:
            return
        began = current.began_ms if current is not None else (
            record.store_timestamp if root == qo else record.born_timestamp)
        try:
            real_topic, _ = tr.real_destination(record)
        except Exception:  # noqa: BLE001 - a damaged half cannot be committed; keep it out
            log.warning("half record %d has no real topic: ignored", qo)
            return
        self.open[root] = OpenHalf(root, qo, record.physical_offset, tr.check_times(record), began,
                                   tr.immunity_ms(record), real_topic)

    def add_op(self, half_queue_offset: int) -> None:
        root = self.copies.get(half_queue_offset)
        if root is None:
            if half_queue_offset >= self.pruned_below:
                self.early_ops.add(half_queue_offset)
            return
        self.resolve(root, "")

    def resolve(self, root: int, how: str) -> None:
        self.open.pop(root, None)
        if how or root not in self.resolved:
            self.resolved[root] = how

    # -- reading the queues -------------------------------------------------------------------
    def refresh(self, store: MessageStore) -> None:
        """Read what the half and op queues gained since the last refresh. Raises QueueShrank
        when a queue is shorter than what was read (the caller starts a new table)."""
        if self.half_next is None:
            self.half_next = store.min_offset_in_queue(tr.HALF_TOPIC, tr.HALF_QUEUE_ID)
            self.op_next = store.min_offset_in_queue(tr.OP_TOPIC, tr.HALF_QUEUE_ID)
        self.half_next = _read(store, tr.HALF_TOPIC, self.half_next, self.add_half)
        self.op_next = _read(store, tr.OP_TOPIC, self.op_next or 0, self._add_op_record)
        self._prune(store.min_offset_in_queue(tr.HALF_TOPIC, tr.HALF_QUEUE_ID))

    def _add_op_record(self, record: MessageRecord) -> None:
        for offset in tr.op_offsets(record):
            self.add_op(offset)

    def _prune(self, min_half_offset: int) -> None:
        """Forget transactions whose every half record retention deleted: they can neither be
        committed nor checked any more (RocketMQ skips halves older than fileReservedTime)."""
        if min_half_offset <= self.pruned_below:
            return
        self.pruned_below = min_half_offset
        gone = [root for root, newest in self.latest.items() if newest < min_half_offset]
        for root in gone:
            if root in self.open:
                log.warning("transaction %d was never resolved and its half records were "
                            "deleted by retention: dropped", root)
            self.open.pop(root, None)
            self.resolved.pop(root, None)
            self.latest.pop(root, None)
        self.copies = {qo: r for qo, r in self.copies.items() if qo >= min_half_offset}
        self.by_phy = {p: qo for p, qo in self.by_phy.items() if qo >= min_half_offset}
        self.early_ops = {o for o in self.early_ops if o >= min_half_offset}

    # -- queries ------------------------------------------------------------------------------
    def root_of_offset(self, phy_offset: int) -> tuple[int, int] | None:
        """(half queue offset, root) of the half record at a commitlog offset, if known."""
        qo = self.by_phy.get(phy_offset)
        if qo is None:
            return None
        return qo, self.copies[qo]


def _read(store: MessageStore, topic: str, offset: int,
          add: Callable[[MessageRecord], None]) -> int:
    """Feed every record of queue 0 from `offset` to `add`; returns where reading stopped."""
    while True:
        result = store.get_messages(topic, tr.HALF_QUEUE_ID, offset, READ_BATCH)
        status = result.status
        if status is GetStatus.OFFSET_TOO_SMALL:
            offset = result.next_begin_offset  # retention deleted the start
            continue
        if status is GetStatus.OFFSET_OVERFLOW_BADLY:
            raise QueueShrank(f"{topic} ends at {result.max_offset}, read up to {offset}")
        for record in result.messages:
            add(record)
        if result.next_begin_offset <= offset:
            return offset
        offset = result.next_begin_offset
        if status is not GetStatus.FOUND and status is not GetStatus.MESSAGE_WAS_REMOVING \
                and status is not GetStatus.NO_MATCHED_MESSAGE:
            return offset

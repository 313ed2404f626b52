"""Transactional messages on the master: half messages, EndTransaction, and what the checker
(transaction_check.py) appends. Record formats and ids: transaction_records.py.

    SendMessage (TRANSACTION)  -> a half record in RMQ_SYS_TRANS_HALF_TOPIC, invisible to
                                  consumers; OK carries the transaction id (the half record's
                                  offset msg id)
    EndTransaction COMMIT      -> one append of [the real message, an op record]
    EndTransaction ROLLBACK    -> one append of [an op record]
    EndTransaction (resolution unspecified: the producer does not know yet) -> OK, nothing
                                  written; the transaction stays open and is checked again

Both records of a commit go in one batch, which the store appends all or nothing: a crash
cannot leave the message visible with its half still open (which a check-back would commit a
second time), nor the half closed without its message.

Idempotence: the lookup, the append and marking the transaction resolved happen under one lock,
so of two EndTransactions for the same transaction (or an EndTransaction and the checker giving
up) exactly one writes; the other is refused with INVALID_TRANSACTION_ID and writes nothing.
Waiting for the flush and replication policy happens after the lock is released, like a send.

Every state the service keeps (transaction_state.TransactionTable) is rebuilt from the half and
op queues when this node becomes master, so the commitlog is the only truth. A slave keeps no
state and forwards EndTransaction to its master.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store import codec
from store.codec import Message, MessageRecord
from store.put_result import PutResult, PutStatus

from cluster.messaging import transaction_records as tr
from cluster.v2.convert import check_topic_resource, has_control_character
from cluster.messaging.send import send_response
from cluster.messaging.transaction_state import OpenHalf, QueueShrank, TransactionTable
from cluster.v2.v2_status import (RECORDING_TRANSACTION, V2Error, put_status,
                                  put_status_message, v2_require_master)

if TYPE_CHECKING:
    from master.master_role import Appended, MasterRole
    from store.message_store import MessageStore

    from cluster.config.node_role import Role

log = logging.getLogger(__name__)
OK = d.Status(code=d.OK, message="OK")
_HOW = {d.COMMIT: "commit", d.ROLLBACK: "rollback"}
_DONE = {"commit": "committed", "rollback": "rolled back"}


@dataclass(frozen=True)
class Renewed:
    """A check copy just appended: what to send the producer."""
    record: MessageRecord  # the half as read (its content is the copy's)
    transaction_id: str  # the copy's transaction id (its offset msg id, with the check)


class TransactionService:
    """Transactions on this node (see the module docstring): stores half messages, resolves
    EndTransaction (or forwards it from a slave), and appends what the checker asks for
    (check copies, give-up rollbacks). Owns the open-transaction table, rebuilt from the
    half and op queues for each master role (`_loaded_for`).

    `lock` guards `table` and `_loaded_for`, and is held across the lookup, the append and
    the resolution of one transaction, so exactly one of two racing resolutions writes.
    Waiting for the flush and replication happens after it is released."""

    def __init__(self, role: "Role", store: "MessageStore", *, key: bytes) -> None:
        self.role = role
        self.store = store
        self.key = key  # the group's shared key of transaction ids (transaction_records.py)
        self.lock = threading.Lock()
        self.table = TransactionTable()
        self._loaded_for: object | None = None

    # -- the table ----------------------------------------------------------------------------
    def master(self) -> "MasterRole":
        return v2_require_master(self.role, "transactions")

    def ensure_loaded(self, refresh: bool = False) -> "MasterRole":
        """The current master role, with the table built for it (and caught up if asked).
        Call without the lock."""
        master = self.master()
        with self.lock:
            if self._loaded_for is not master:
                self.table = TransactionTable()
                self._loaded_for = master
                refresh = True
            if refresh:
                self._refresh_locked()
        return master

    def _refresh_locked(self) -> None:
        try:
            self.table.refresh(self.store)
        except QueueShrank as e:
            log.warning("transaction queues changed under the table (%s): rebuilding", e)
            self.table = TransactionTable()
            self.table.refresh(self.store)

    def open_transactions(self) -> list[OpenHalf]:
        with self.lock:
            return sorted(self.table.open.values(), key=lambda h: h.root)

    # -- SendMessage --------------------------------------------------------------------------
    def prepare(self, v2: d.Message, msg: Message) -> s.SendMessageResponse:
        """Store a validated transactional message (queue picked) as a half record."""
        try:
            master = self.ensure_loaded()
        except V2Error as e:
            return s.SendMessageResponse(status=e.status())
        half = tr.half_message(msg, v2)
        # a retried half-send is a repeat of its half (the duplicate window), answered with the
        # same transaction id; the half's commit record is not a send (store/dedup/window.py)
        appended = master.append([half], allow_system_topic=True, dedup=True)
        record = None
        if appended.result.status is PutStatus.PUT_OK:
            record = self._appended_record(appended.result)
            if record is not None and not appended.result.repeated:
                with self.lock:
                    if self._loaded_for is master:
                        self.table.add_half(record)
        result = appended.wait()
        uniq = msg.properties[codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
        # The id names the half by its offset msg id as stored: a repeat's half may have been
        # written by an earlier master (another store host in the id).
        offset_ids = [record.msg_id] if record is not None and result.repeated else \
            [a.msg_id for a in result.appends]
        ids = [tr.transaction_id(self.key, i, msg.topic, uniq) for i in offset_ids]
        return send_response(result, [half], ids)

    def _appended_record(self, result: PutResult) -> MessageRecord | None:
        append = result.append
        record = self.store.look_message_by_offset(append.wrote_offset)
        if record is None:
            log.error("cannot read back the half record just appended at %d", append.wrote_offset)
        return record

    # -- EndTransaction -----------------------------------------------------------------------
    def end(self, request: s.EndTransactionRequest) -> s.EndTransactionResponse:
        topic = check_topic_resource(request.topic)
        message_id = request.message_id
        if not message_id.strip() or has_control_character(message_id):
            raise V2Error(d.ILLEGAL_MESSAGE_ID, "message id cannot be empty or contain control "
                                                "characters")
        if not request.transaction_id.strip():
            raise V2Error(d.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
        phy, offset_msg_id = tr.transaction_offset(self.key, request.transaction_id, topic,
                                                   message_id)
        resolution = request.resolution
        if resolution not in (d.COMMIT, d.ROLLBACK, d.TRANSACTION_RESOLUTION_UNSPECIFIED):
            raise V2Error(d.BAD_REQUEST, f"unknown resolution {resolution}")
        master = self.ensure_loaded()
        record = self._half_at(phy, offset_msg_id, request.transaction_id)
        self._check_matches(record, topic, message_id, request.transaction_id)
        if resolution == d.TRANSACTION_RESOLUTION_UNSPECIFIED:
            return s.EndTransactionResponse(status=d.Status(
                code=d.OK, message="resolution unknown: the transaction stays open and will be "
                                   "checked again"))
        how = _HOW[resolution]
        with self.lock:
            known = self.table.root_of_offset(phy)
            if known is None or self._loaded_for is not master:
                raise V2Error(d.INVALID_TRANSACTION_ID, f"transaction {request.transaction_id} "
                                                        f"is unknown to this master")
            queue_offset, root = known
            done = self.table.resolved.get(root)
            if done is not None:
                what = _DONE.get(done, "committed or rolled back")
                raise V2Error(d.INVALID_TRANSACTION_ID,
                              f"transaction {request.transaction_id} of message {message_id} was "
                              f"already {what}; nothing was written")
            msgs = [tr.committed_message(record)] if how == "commit" else []
            msgs.append(tr.op_message(queue_offset))
            appended = self._append_locked(master, msgs)
            self.table.resolve(root, how)
        log.info("transaction %s of %s on %s: %s (%s)", request.transaction_id, message_id, topic,
                 how, d.TransactionSource.Name(request.source) if request.source in
                 d.TransactionSource.values() else request.source)
        status = put_status(appended.wait(), RECORDING_TRANSACTION)
        return s.EndTransactionResponse(status=status)

    def _half_at(self, phy: int, offset_msg_id: str, transaction_id: str) -> MessageRecord:
        """The half record a transaction id names: it must be a record the half queue lists at
        that commitlog offset (so an offset into a message body finds nothing)."""
        with self.lock:
            known = self.table.root_of_offset(phy)
            if known is None:
                self._refresh_locked()
                known = self.table.root_of_offset(phy)
        if known is None:
            raise V2Error(d.INVALID_TRANSACTION_ID, f"transaction {transaction_id} is unknown: no "
                                                    f"half message at offset {phy}")
        record = self.store.look_message_by_offset(phy)
        if record is None or record.topic != tr.HALF_TOPIC or record.queue_offset != known[0] \
                or record.msg_id != offset_msg_id.upper():
            raise V2Error(d.INVALID_TRANSACTION_ID, f"transaction {transaction_id} does not name "
                                                    f"a half message")
        return record

    @staticmethod
    def _check_matches(record: MessageRecord, topic: str, message_id: str,
                       transaction_id: str) -> None:
        real_topic, _ = tr.real_destination(record)
        if real_topic != topic:
            raise V2Error(d.INVALID_TRANSACTION_ID, f"transaction {transaction_id} belongs to "
                                                    f"topic {real_topic}, not {topic}")
        uniq = record.properties.get(codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")
        if uniq != message_id:
            raise V2Error(d.ILLEGAL_MESSAGE_ID, f"transaction {transaction_id} belongs to message "
                                                f"{uniq}, not {message_id}")

    def _append_locked(self, master: "MasterRole", msgs: Sequence[Message]) -> "Appended":
        """The records appended (V2Error when refused); the caller waits outside the lock."""
        appended = master.append(msgs, allow_system_topic=True)
        if appended.result.status is not PutStatus.PUT_OK:
            raise V2Error.from_put(appended.result, RECORDING_TRANSACTION)
        return appended

    # -- for the checker ----------------------------------------------------------------------
    def renew(self, half: OpenHalf) -> Renewed | None:
        """Append the check copy of an open transaction (check count + 1) and wait for it to
        hold; None when the transaction was resolved meanwhile or the copy was not stored."""
        master = self.master()
        record = self.store.look_message_by_offset(half.phy_offset)
        if record is None or record.topic != tr.HALF_TOPIC:
            log.error("open transaction %d: no half record at %d", half.root, half.phy_offset)
            return None
        copy = tr.renewed_half(record, half.root, half.check_times + 1)
        with self.lock:
            if self._loaded_for is not master or half.root not in self.table.open:
                return None
            appended = self._append_locked(master, [copy])
            renewed = self._appended_record(appended.result)
            if renewed is not None:
                self.table.add_half(renewed)
        result = appended.wait()
        if not result.status.stored:
            log.warning("check copy of transaction %d: %s", half.root,
                        put_status_message(result, RECORDING_TRANSACTION))
            return None
        uniq = record.properties.get(codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")
        return Renewed(record, tr.transaction_id(self.key, result.append.msg_id, half.real_topic,
                                                 uniq))

    def give_up(self, half: OpenHalf) -> bool:
        """Roll back a transaction checked transactionCheckMax times (an op record)."""
        master = self.master()
        with self.lock:
            if self._loaded_for is not master or half.root not in self.table.open:
                return False
            msgs = [tr.op_message(half.queue_offset)]
            appended = self._append_locked(master, msgs)
            self.table.resolve(half.root, "rollback")
        status = put_status(appended.wait(), RECORDING_TRANSACTION)
        log.warning("transaction %d (topic %s) was checked %d times without an answer: rolled "
                    "back (%s)", half.root, half.real_topic, half.check_times, status.message)
        return True

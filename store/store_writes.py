"""The write side of the store: puts (checks and encoding, the append, the wait the flush policy
asks for) and the replication's raw appends and cuts. A part of MessageStore (message_store.py),
which builds everything these methods use; kept apart so that each file reads as one job:

    put_messages -> append (PutInput.encode outside the lock -> CommitLog.put_batch)
                 -> wait_durable (SYNC_FLUSH: the group commit) -> PutResult
    append_raw / truncate / prepare_for_writes: a slave's log and a replica turning master
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Sequence

from . import codec, recovery, running_flags as rf
from .codec import Message
from common.completion import Completion
from .errors import CreateFileError, DiskError, NoRoomForFile
from .flush.group_commit import GroupCommitService
from .put_result import PutResult, PutStatus
from .retention.retention_guard import TABLE_TOPIC_PREFIX

if TYPE_CHECKING:
    from .commitlog.commitlog import CommitLog
    from .config import StoreConfig
    from .commitlog.fileio import FileIO
    from .message_store import StoreStats
    from .queue.consume_queue_store import ConsumeQueueStore
    from .flush.flush import AsyncFlushService, CommitService, FlushFailure
    from .index.index_process import IndexProcess
    from .index.index_service import IndexService
    from .put_input import PutInput
    from .reput import ReputService

log = logging.getLogger(__name__)


class StoreWrites:
    """MessageStore's puts and raw replication writes. Holds no state of its own: the
    attributes below are MessageStore's (its docstring says which lock guards what)."""

    config: "StoreConfig"
    flags: rf.RunningFlags
    commitlog: "CommitLog"
    cq_store: "ConsumeQueueStore"
    index_service: "IndexService | IndexProcess | None"
    reput: "ReputService"
    flusher: "GroupCommitService | AsyncFlushService"
    committer: "CommitService | None"
    input: "PutInput"
    confirm_source: Callable[[], int] | None
    append_listeners: list[Callable[[int], None]]
    truncate_listeners: list[Callable[[int], None]]
    generation: int
    ready_generation: int
    stats: "StoreStats"
    io: "FileIO"
    flush_failure: "FlushFailure"
    flushed_offset: int  # a property of MessageStore
    _on_disk_error: Callable[[DiskError], None]  # a method of MessageStore

    # -- put ---------------------------------------------------------------------------------
    def put_message(self, msg: Message) -> PutResult:
        return self.put_messages([msg])

    def put_messages(self, msgs: Sequence[Message], *, allow_system_topic: bool = False) -> PutResult:
        """Append the messages as one batch, then wait for the flush policy."""
        return self.wait_durable(msgs, self.append(msgs, allow_system_topic=allow_system_topic))

    def wait_durable(self, msgs: Sequence[Message], result: PutResult) -> PutResult:
        """Wait until an append's result holds under the flush policy (SYNC_FLUSH: on disk)."""
        if result.status is not PutStatus.PUT_OK or not self._wants_wait(msgs):
            return result
        return self._flushed_result(result, self.wait_flushed(result.end_offset))

    async def wait_durable_async(self, msgs: Sequence[Message], result: PutResult) -> PutResult:
        """wait_durable for a coroutine on an event loop: the group commit's service thread
        flushes, the loop awaits the completion (no thread waits)."""
        if result.status is not PutStatus.PUT_OK or not self._wants_wait(msgs):
            return result
        timeout_s = self.config.sync_flush_timeout / 1000.0
        # the service times the completion out itself after a round; the margin covers a
        # round that is stuck in its flush
        status = await self.durability(result.end_offset).wait_async(timeout_s + 0.5)
        return self._flushed_result(result, status or PutStatus.FLUSH_DISK_TIMEOUT)

    def _flushed_result(self, result: PutResult, status: PutStatus) -> PutResult:
        if status is not PutStatus.PUT_OK:
            self.stats.put_failures += 1
        return PutResult(status, result.appends, self.flags.reason if status is not PutStatus.PUT_OK
                         and status is not PutStatus.FLUSH_DISK_TIMEOUT else "")

    def _wants_wait(self, msgs: Sequence[Message]) -> bool:
        if not self.config.is_sync_flush:
            return False
        return any(m.properties.get(codec.PROPERTY_WAIT_STORE_MSG_OK, "true") != "false" for m in msgs)

    def check(self, msgs: Sequence[Message], *, allow_system_topic: bool = False
              ) -> PutResult | None:
        """The refusal `append` would answer for these messages themselves (MESSAGE_ILLEGAL,
        PROPERTIES_SIZE_EXCEEDED), or None: lets a caller that writes something else first (a
        topic record) refuse bad input before it writes anything. The store's own state (not
        writable) is `append`'s to answer."""
        _, refusal = self.input.encode(msgs, allow_system_topic, hinted=False)
        return refusal

    def append(self, msgs: Sequence[Message], *, allow_system_topic: bool = False) -> PutResult:
        """Validate, encode and append; no waiting. Returns PUT_OK with where each landed, or
        the refusal (nothing written)."""
        if msgs and not self.flags.writable and not self._table_record_passes(
                msgs, allow_system_topic):
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason=self.flags.reason)
        encoded, refusal = self.input.encode(msgs, allow_system_topic)
        if refusal is not None:
            return refusal
        own = _own_records(msgs, allow_system_topic)
        try:
            appends = self.commitlog.put_batch(encoded, None if own else self._keep_room)
        except NoRoomForFile as e:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason=str(e))
        except CreateFileError as e:
            self.stats.put_failures += 1
            return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, reason=str(e))
        except DiskError as e:
            self._on_disk_error(e)
            return PutResult(PutStatus.UNKNOWN_ERROR, reason=str(e))
        except ValueError as e:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, reason=str(e))
        for listener in self.append_listeners:
            listener(appends[-1].end_offset)
        stats = self.stats
        stats.put_messages += len(appends)
        stats.put_bytes += appends[-1].end_offset - appends[0].wrote_offset
        if not self.config.is_sync_flush:
            if self.committer is not None:
                self.committer.wakeup()
            elif (not self.config.flush_commit_log_timed
                    and self.flusher.due(appends[-1].end_offset)):
                self.flusher.wakeup()
        if self.confirm_source is None and self.appends_wake_reput:
            # a master bounds reput by its confirm offset and wakes it itself
            # (MasterRole._on_append)
            self.reput.wakeup()
        return PutResult(PutStatus.PUT_OK, tuple(appends))

    @property
    def appends_wake_reput(self) -> bool:
        """An append's bytes may be dispatched as soon as it returns (a confirm offset aside),
        so whoever moves reput's bound with it wakes reput rather than leave a consumer waiting
        for reput's next idle round, up to 5 ms away. Not under SYNC_FLUSH nor with the write
        buffer: reput then waits for the flush, which wakes it (`_on_flushed`)."""
        return not self.config.is_sync_flush and self.committer is None

    def wait_flushed(self, end_offset: int, timeout_s: float | None = None) -> PutStatus:
        """Block until the flush policy holds for everything below end_offset: under SYNC_FLUSH
        the caller joins the group commit (it may flush for the whole group itself); the
        timeout defaults to syncFlushTimeout."""
        if isinstance(self.flusher, GroupCommitService):
            if timeout_s is None:
                timeout_s = self.config.sync_flush_timeout / 1000.0
            return self.flusher.wait_flushed(end_offset, timeout_s)
        return PutStatus.FLUSH_DISK_FAILED if self.flush_failure.failed else PutStatus.PUT_OK

    def _keep_room(self, new_files: int) -> None:
        """A client put may create commitlog files only while one more file would still fit
        the volume: that room is kept for the node's own table records (consumer acks and
        offsets), which must always go through, or consumers could not catch up and let
        retention free space (diskPressurePolicy=protect-unconsumed). The retention guard
        refuses writes from a usage ratio, every cleanResourceInterval; a fast producer can
        fill the rest of a small volume between two of its rounds."""
        size = self.config.mapped_file_size_commit_log
        try:
            free = self.io.free_bytes(self.config.commit_log_dir)
        except OSError:
            return  # no probe: the file's creation itself says whether it fits
        if free < (new_files + 1) * size:
            raise NoRoomForFile(
                f"{rf.DISK_FULL}: {free} bytes free on the commitlog's volume; a new commitlog "
                f"file for client messages must leave room for one more ({size} bytes), kept "
                f"for the node's own records (consumer acks and offsets)")

    def _table_record_passes(self, msgs: Sequence[Message], allow_system_topic: bool) -> bool:
        """Under DISK_FULL alone, the node's own table records are still written: they are
        small, and consumers' acks are what lets retention free space under
        diskPressurePolicy=protect-unconsumed. Client messages (transaction halves included)
        stay refused."""
        return set(self.flags.reasons) == {rf.DISK_FULL} and _own_records(msgs, allow_system_topic)

    def durability(self, end_offset: int) -> Completion[PutStatus]:
        """Resolves when the flush policy holds for everything below end_offset."""
        if isinstance(self.flusher, GroupCommitService):
            return self.flusher.submit(end_offset)
        done: Completion[PutStatus] = Completion()
        done.complete(PutStatus.FLUSH_DISK_FAILED if self.flush_failure.failed else PutStatus.PUT_OK)
        return done

    # -- raw (replication) -----------------------------------------------------------------
    def append_raw(self, offset: int, data: bytes) -> None:
        """Slave path: append replicated bytes verbatim at exactly the current end."""
        if self.flags.has(rf.DISK_ERROR):
            raise DiskError("append", self.config.commit_log_dir, OSError(5, self.flags.reason))
        self.commitlog.append_raw(offset, data)
        if not self.config.is_sync_flush:
            self.flusher.wakeup()
        self.reput.wakeup()

    def truncate(self, offset: int) -> None:
        """Crash-safely cut the commitlog, consume queues and index at `offset`."""
        with self.reput._lock:
            self.commitlog.truncate(offset)
            self.reput.hints.clear()  # what lay past the cut is gone, and with it their hints
            self.cq_store.truncate_dirty(offset)
            if self.index_service is not None:
                self.index_service.truncate_dirty(offset)
            self.reput.reput_from_offset = min(self.reput.reput_from_offset, offset)
            self.commitlog.topic_queue_table = recovery.rebuild_queue_table(
                self.commitlog, self.cq_store.queue_offset_table(), self.reput.reput_from_offset)
            self.generation += 1
            for listener in self.truncate_listeners:
                listener(offset)

    def prepare_for_writes(self) -> int:
        """A replica becoming master: cut a torn tail (a chunk that ended mid-record), flush
        (SYNC_FLUSH) and dispatch everything it holds, and rebuild the queue offsets from it.
        Returns the end."""
        with self.reput._lock:
            end = recovery.valid_end_from(self.commitlog, self.reput.reput_from_offset,
                                          self.config.check_crc_on_recover)
        if end < self.commitlog.max_wrote_offset():
            log.warning("cutting a torn replicated tail at %d (was %d)", end,
                        self.commitlog.max_wrote_offset())
            self.truncate(end)
        self.confirm_source = None
        if self.config.is_sync_flush and self.flushed_offset < end:
            # Under SYNC_FLUSH reput stops at the flushed offset: flush the replicated tail so
            # that everything this node holds is dispatched before it writes (replicated
            # tables replay their queues when the node starts to lead).
            self.wait_flushed(end)
        self.reput.catch_up()
        with self.reput._lock:
            self.commitlog.topic_queue_table = recovery.rebuild_queue_table(
                self.commitlog, self.cq_store.queue_offset_table(), self.reput.reput_from_offset)
        self.ready_generation = self.generation
        return end


def _own_records(msgs: Sequence[Message], allow_system_topic: bool) -> bool:
    """The node's own table records (rmq_sys_*: consumer acks and offsets, topics, schedule
    progress), which the disk guards let through."""
    return allow_system_topic and all(m.topic.startswith(TABLE_TOPIC_PREFIX) for m in msgs)

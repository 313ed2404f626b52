"""The store facade: load/recover, start/shutdown, puts and the replication's raw appends and
cuts, reads, queries, stats.

    put_messages -> append (PutInput.encode outside the lock -> CommitLog.put_batch)
                 -> flush_wait (SYNC_FLUSH: the group commit, waited for in a thread or
                    awaited on an event loop) -> PutResult
    append_raw / truncate / prepare_for_writes: a slave's log and a replica turning master
    ReputService -> ConsumeQueueStore / IndexService (dispatchers)

Durability: under SYNC_FLUSH a put returns PUT_OK only once the group commit flushed past its
end; a failed flush answers FLUSH_DISK_FAILED and turns the store not writable (sticky). The
replication wait (master/) composes on top of `append` + `flush_wait`.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from . import codec, recovery, running_flags as rf
from .checkpoint import StoreCheckpoint
from common.clock import SYSTEM_CLOCK, Clock
from common.service import Service
from .commitlog.commitlog import CommitLog
from .config import StoreConfig
from .queue.consume_queue_store import ConsumeQueueStore
from .codec import Message, MessageRecord
from .codec.dispatch import DispatchRequest, delay_level_lookup
from .dedup.rebuild import Rebuilt, rebuild, walk_start
from .dedup.window import DuplicateWindow, WindowStats
from .errors import CreateFileError, DiskError, MessageIllegal, NoRoomForFile
from .commitlog.fileio import DEFAULT_FILE_IO, FileIO
from .flush.flush import AsyncFlushService, CommitService, FlushFailure
from .flush.group_commit import FlushWait, GroupCommitService
from .index.index_process import IndexFileInfo, IndexProcess
from .index.index_service import IndexService
from .latency import ByStatus, LatencyHistogram
from .retention.retention_guard import (TABLE_TOPIC_PREFIX, ArchivedUpTo, ConsumerProgress,
                                        no_consumers)
from .layout import StoreLayout
from .flush.logics_flush import LogicsFlushService
from .markers import AbortMarker, StoreLock
from .reader import MessageReader, TagFilter
from .get_result import GetMessageResult, QueueRef
from .reput import ReputService
from .commitlog.prefault import PrefaultService
from .put_input import PutInput
from .put_result import AppendResult, PutResult, PutStatus

if TYPE_CHECKING:
    from .commitlog.commitlog import RecordReader
    from .commitlog.mapped_file import MappedFile
    from .index.index_file import IndexFile
    from .queue.consume_queue import ConsumeQueue
    from .retention.retention import RetentionService  # they import this module's types
    from .schedule.schedule import ScheduleService

log = logging.getLogger(__name__)


@dataclass
class StoreStats:
    """The store's put and get counters since it started. Updated by the putting and reading
    threads without a lock (`+=` is not atomic): statistics, not exact under concurrency."""

    put_messages: int = 0
    put_bytes: int = 0
    put_failures: int = 0
    get_messages: int = 0


class MessageStore:
    """The store facade. Owns the store directory (its `lock` held from load() to shutdown(),
    the `abort` marker while started, the checkpoint), the commitlog, the consume queues, the
    index, the checks and encoding of every put's input (`input`, put_input.PutInput), the
    duplicate window of recent client sends (`duplicates`, store/dedup/), and the services
    that work on them: flush (and commit in write-buffer mode),
    reput, logics flush, prefault, plus retention, the schedule service and the node's archive
    shipper, which are attached. Code outside store/ uses its methods and properties, never
    those parts: they are the store's to change.

    Locking: `_lifecycle` serialises start() and shutdown(). Everything else is guarded where
    it lives: CommitLog.put_lock for appends, truncation and queue offsets; reput's lock for
    dispatch, which truncate() and prepare_for_writes() also take so that reput never walks
    bytes being cut; the consume queues' and the index's own locks for their files. `flags`
    (RunningFlags) is thread-safe; `stats` counters are updated without a lock (approximate
    under concurrency)."""

    def __init__(self, config: StoreConfig, *, io: FileIO = DEFAULT_FILE_IO,
                 clock: Clock = SYSTEM_CLOCK, auto_services: bool = True) -> None:
        self.config = config
        self.auto_services = auto_services
        self.io = io
        self.clock = clock
        self.root = config.store_path_root_dir
        self.flags = rf.RunningFlags()
        self.stats = StoreStats()
        # put (append + flush + replication wait) latency by status, recorded by MasterRole
        self.put_latency = ByStatus()
        paths = StoreLayout(self.root)
        self.lock = StoreLock(paths.lock, io)
        self.abort = AbortMarker(paths.abort, io)
        self.checkpoint = StoreCheckpoint(paths.checkpoint, io)
        buffered = config.transient_store_pool_enable or config.write_without_mmap
        self.commitlog = CommitLog(config.commit_log_dir, config.mapped_file_size_commit_log, io,
                                   clock, write_through_mmap=not buffered,
                                   store_host=config.store_host,
                                   small_flushes=config.is_sync_flush)
        self.cq_store = ConsumeQueueStore(paths.consume_queue_dir,
                                          config.mapped_file_size_consume_queue, io)
        self.index_service: IndexService | IndexProcess | None = None
        if config.message_index_enable and config.message_index_process_enable:
            self.index_service = IndexProcess(
                paths.index_dir, config.max_hash_slot_num, config.max_index_num, clock,
                lock_fd=lambda: self.lock.fd,
                index_msg_timestamp=lambda: self.checkpoint.index_msg_timestamp)
        elif config.message_index_enable:
            self.index_service = IndexService(paths.index_dir, config.max_hash_slot_num,
                                              config.max_index_num, io, clock)
        self._delay_levels = config.delay_levels_ms()
        self.delay_level_ms = delay_level_lookup(self._delay_levels)
        dispatchers = [self.cq_store] + ([self.index_service] if self.index_service else [])
        # Replication sets where dispatch must stop (the master: min of in-sync acks; a slave:
        # what its master confirmed). None: not bounded (a standalone store).
        self.confirm_source: Callable[[], int] | None = None
        self.append_listeners: list[Callable[[int], None]] = []  # called with the new end
        # Called with the offset after every truncate() (under reput's lock: set a flag, take
        # no lock): readers that keep state derived from the log notice a cut below it.
        self.truncate_listeners: list[Callable[[int], None]] = []
        # State a master derives from its log (the schedule service's progress) is valid for
        # one `generation`: it moves when the role flips between slave and master and when the
        # log is cut. `ready_generation` is the generation whose log prepare_for_writes (or, on
        # a store that starts as a master, load) made complete and dispatched.
        self.generation = 0
        self.ready_generation = -1 if config.is_slave else 0
        self.reput = ReputService(self.commitlog, dispatchers, self.delay_level_ms,
                                  bound=self._dispatch_bound, batch_bytes=config.reput_batch_max_bytes)
        self.reput.listeners.append(self._on_dispatched)
        # The ids of recent client sends (store/dedup/): entered by the puts, by reput from
        # where the puts' entries end (a slave's records), and by a walk of the tail at load.
        self.duplicates = DuplicateWindow(lambda: self.config, clock)
        self.reput.listeners.append(self.duplicates.feed)
        self.duplicates_rebuilt: Rebuilt | None = None
        self.commitlog.dispatch_hints = self.reput.hints
        if isinstance(self.index_service, IndexProcess):
            self.index_service.replay = self.reput.requests_between
        self.reput.on_error = lambda m: self.flags.set(rf.DISPATCH_ERROR, m)
        self.reput.on_error_cleared = lambda: self.flags.clear(rf.DISPATCH_ERROR)
        self._last_dispatched_stamp = 0
        self._physic_stamp = 0
        self.flush_failure = FlushFailure(self._on_disk_error)
        self._build_flush_services()
        self.logics_flush = LogicsFlushService(
            self.cq_store, self.index_service, self.checkpoint, clock,
            dispatched_stamp=lambda: self._last_dispatched_stamp,
            physic_stamp=lambda: self._physic_stamp, on_failure=self._on_disk_error,
            interval_ms=config.flush_interval_consume_queue,
            least_pages=config.flush_consume_queue_least_pages,
            thorough_interval_ms=config.flush_consume_queue_thorough_interval)
        self.prefault = PrefaultService(self.commitlog.queue, config.prefault_ahead_bytes,
                                        always=lambda: self.config.is_slave)
        self.reader = MessageReader(self.commitlog, self.cq_store, self.index_service,
                                    max_bytes=config.max_transfer_bytes_on_message_in_memory,
                                    max_count=config.max_msgs_num_batch)
        self.input = PutInput(lambda: self.config, clock, self._delay_levels)
        # Started and stopped with the services above: retention and the schedule service
        # (their modules' attach(), or start() with defaults) and the node's archive shipper
        # (attach_archive).
        self.retention: RetentionService | None = None
        self.schedule: ScheduleService | None = None
        self.archive_shipper: Service | None = None
        # Injected by the node (store/retention/retention_guard.py): what consumer groups still need,
        # and (the archive's hooks, unset until there is one) how far the archive answered
        # for the files and how far it holds them.
        self.consumer_progress: ConsumerProgress = no_consumers
        self.archived_up_to: ArchivedUpTo | None = None
        self.archive_held_up_to: ArchivedUpTo | None = None
        self.recovery_report: recovery.RecoveryReport | None = None
        self._loaded = False
        self._started = False
        self._lifecycle = threading.Lock()

    def _build_flush_services(self) -> None:
        c = self.config
        q = self.commitlog.queue
        stamp = lambda: self.commitlog.last_store_timestamp  # noqa: E731
        if c.is_sync_flush:
            self.flusher = GroupCommitService(q, self.clock, self.flush_failure, self._on_flushed,
                                              stamp, timeout_ms=c.sync_flush_timeout)
        else:
            self.flusher = AsyncFlushService(q, self.clock, self.flush_failure, self._on_flushed,
                                             stamp, interval_ms=c.flush_interval_commit_log,
                                             least_pages=c.flush_commit_log_least_pages,
                                             thorough_interval_ms=c.flush_commit_log_thorough_interval)
        self.committer = (CommitService(q, self.clock, self.flush_failure, self.flusher,
                                        interval_ms=c.commit_interval_commit_log,
                                        least_pages=c.commit_commit_log_least_pages,
                                        thorough_interval_ms=c.commit_commit_log_thorough_interval)
                          if (c.transient_store_pool_enable or c.write_without_mmap)
                          and not c.is_sync_flush else None)

    # -- lifecycle ---------------------------------------------------------------------------
    def load(self, progress=None) -> recovery.RecoveryReport:
        """Lock the store directory, load every file and recover. Raises StoreLocked."""
        self.io.makedirs(self.root)
        self.lock.acquire()
        try:
            abnormal = self.abort.exists()
            self.checkpoint = StoreCheckpoint.load(self.checkpoint.path, self.io)
            self.logics_flush.checkpoint = self.checkpoint
            if self.checkpoint.damaged:
                abnormal = True  # without a checkpoint we cannot trust a normal recovery
            notes = self.commitlog.queue.load()
            self.cq_store.load()
            self.cq_store.recover()
            if self.index_service is not None:
                self.index_service.load(not abnormal, self.checkpoint.index_msg_timestamp)
            min_ts = (self.checkpoint.min_timestamp_index() if self.config.message_index_safe
                      else self.checkpoint.min_timestamp())
            report = recovery.recover_commitlog(
                self.commitlog, abnormal=abnormal, dispatch_from=self.cq_store.max_physic_offset(),
                min_timestamp=min_ts, check_crc=self.config.check_crc_on_recover,
                verify_prop_crc=self.config.force_verify_prop_crc, progress=progress)
            report.notes[:0] = notes
            end = report.end_offset
            self.cq_store.truncate_dirty(end)
            if self.index_service is not None:
                self.index_service.truncate_dirty(end)
            if self.checkpoint.confirm_phy_offset > end:
                self.checkpoint.confirm_phy_offset = end
            self.reput.reput_from_offset = report.reput_from
            self._rebuild_duplicates(report.reput_from, end)
            self.reput.catch_up()
            self.commitlog.topic_queue_table = recovery.rebuild_queue_table(
                self.commitlog, self.cq_store.queue_offset_table(), self.reput.reput_from_offset)
            self.commitlog.last_store_timestamp = max(self.checkpoint.physic_msg_timestamp,
                                                      self._last_dispatched_stamp)
            self.recovery_report = report
            self._loaded = True
            return report
        except BaseException:
            if isinstance(self.index_service, IndexProcess):
                self.index_service.close()  # it holds the lock too
            self.lock.release()
            raise

    def _rebuild_duplicates(self, dispatched: int, end: int) -> None:
        """Enter the client sends of the last duplicateWindowSeconds in the duplicate window
        (store/dedup/rebuild.py): reput restarts from its checkpoint and would miss the older
        ones. The consume queues list the records below `dispatched`."""
        began = time.perf_counter()
        window_ms, max_entries = self.duplicates.limits()
        start = end
        if window_ms:
            now = self.clock.now_ms()
            start = walk_start(self.cq_store.queues(), self.commitlog.store_time_of,
                               now - window_ms, now, max_entries, dispatched)
        self.duplicates_rebuilt = rebuild(self.duplicates, self.commitlog.queue, start, end,
                                          began)

    def start(self) -> None:
        with self._lifecycle:
            if not self._loaded:
                self.load()
            if self.auto_services:
                self._attach_default_services()
            self.abort.create()
            for s in self._services():
                s.start()
            self.flags.clear(rf.NOT_STARTED)
            self._started = True

    def _attach_default_services(self) -> None:
        """Retention and the schedule (delay) service run with every store unless a caller
        attached its own instances (tests inject clocks and disk-usage functions)."""
        from .retention.retention import attach as attach_retention
        from .schedule.schedule import attach as attach_schedule  # they import this module
        if self.retention is None:
            attach_retention(self)
        if self.schedule is None:
            attach_schedule(self)

    def attach_archive(self, shipper: Service, released_up_to: ArchivedUpTo,
                       held_up_to: ArchivedUpTo) -> None:
        """The node's archive shipper, started and stopped with the store's services, and its
        hooks for retention (`archived_up_to`, `archive_held_up_to`: retention_guard.py).
        Attach before load(): retention waits for the archive from its first round."""
        self.archive_shipper = shipper
        self.archived_up_to = released_up_to
        self.archive_held_up_to = held_up_to

    def _services(self) -> list[Service]:
        services: list[Service] = [self.flusher, self.reput, self.logics_flush, self.prefault]
        if self.committer is not None:
            services.insert(0, self.committer)
        return services + [s for s in (self.archive_shipper, self.retention, self.schedule)
                           if s is not None]

    def shutdown(self) -> None:
        """Stop services, flush everything, close files; a clean exit removes `abort` (unless a
        disk error happened: then the next start must recover abnormally)."""
        with self._lifecycle:
            self.flags.set(rf.SHUTDOWN, "store shutting down")
            if self._started:
                for s in reversed(self._services()):
                    s.stop()
            elif self._loaded and not self.flush_failure.failed:
                self.flusher.on_stop()
                self.logics_flush.on_stop()
            clean = not self.flush_failed
            self.commitlog.close()
            self.cq_store.close()
            if self.index_service is not None:
                self.index_service.close()
            if self._started and clean:
                self.abort.remove()
            if self._loaded:
                self.lock.release()
            self._started = self._loaded = False

    def __enter__(self) -> "MessageStore":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # -- put ---------------------------------------------------------------------------------
    def put_message(self, msg: Message) -> PutResult:
        return self.put_messages([msg])

    def put_messages(self, msgs: Sequence[Message], *, allow_system_topic: bool = False) -> PutResult:
        """Append the messages as one batch, then wait in this thread for the flush policy."""
        result = self.append(msgs, allow_system_topic=allow_system_topic)
        flush = self.flush_wait(msgs, result)
        return result if flush is None else flush.wait()

    def flush_wait(self, msgs: Sequence[Message], result: PutResult) -> FlushWait | None:
        """What an append's `result` waits for before it is the put's answer: under SYNC_FLUSH,
        its end on disk (a FlushWait, which the caller waits for as it runs: `wait()` in a
        thread, `await` on an event loop; either returns the answer). None when `result` is
        the answer already: a refusal, ASYNC_FLUSH, or messages that all asked not to wait
        (WAIT=false)."""
        flusher = self.flusher  # a GroupCommitService exactly under SYNC_FLUSH (fixed at start)
        if (result.status is not PutStatus.PUT_OK or not isinstance(flusher, GroupCommitService)
                or not waits_for_store(msgs)):
            return None
        return FlushWait(flusher, result, self.config.sync_flush_timeout / 1000.0,
                         self._flushed_result)

    def _flushed_result(self, result: PutResult, status: PutStatus) -> PutResult:
        if status is not PutStatus.PUT_OK:
            self.stats.put_failures += 1
        return PutResult(status, result.appends, self.flags.reason if status is not PutStatus.PUT_OK
                         and status is not PutStatus.FLUSH_DISK_TIMEOUT else "", result.repeated)

    def check(self, msgs: Sequence[Message], *, allow_system_topic: bool = False
              ) -> PutResult | None:
        """The refusal `append` would answer for these messages themselves (MESSAGE_ILLEGAL,
        PROPERTIES_SIZE_EXCEEDED), or None: lets a caller that writes something else first (a
        topic record) refuse bad input before it writes anything. The store's own state (not
        writable) is `append`'s to answer."""
        _, refusal = self.input.encode(msgs, allow_system_topic, hinted=False)
        return refusal

    def append(self, msgs: Sequence[Message], *, allow_system_topic: bool = False,
               dedup: bool = False) -> PutResult:
        """Validate, encode and append; no waiting. Returns PUT_OK with where each landed, or
        the refusal (nothing written). `dedup`: the put is a client's send, so a message that
        repeats a send in the duplicate window is not written again and its original's place
        answers for it (an OriginalAppend; PutResult.repeated counts them); an id reused for
        another message is refused (MESSAGE_ILLEGAL "illegal message id")."""
        if msgs and not self.flags.writable and not self._table_record_passes(
                msgs, allow_system_topic):
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason=self.flags.reason)
        encoded, refusal = self.input.encode(msgs, allow_system_topic)
        if refusal is not None:
            return refusal
        own = _own_records(msgs, allow_system_topic)
        try:
            appends = self.commitlog.put_batch(encoded, None if own else self._keep_room,
                                               self.duplicates, repeats=dedup)
        except MessageIllegal as e:  # an id reused within the duplicate window
            return PutResult(PutStatus.MESSAGE_ILLEGAL, reason=str(e))
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
        repeated = 0
        written = appends
        if dedup:
            written = [a for a in appends if type(a) is AppendResult]
            repeated = len(appends) - len(written)
            if not written:  # every message repeated a send: nothing was written
                return PutResult(PutStatus.PUT_OK, tuple(appends), repeated=repeated)
        for listener in self.append_listeners:
            listener(written[-1].end_offset)
        stats = self.stats
        stats.put_messages += len(written)
        stats.put_bytes += written[-1].end_offset - written[0].wrote_offset
        if not self.config.is_sync_flush:
            if self.committer is not None:
                self.committer.wakeup()
            elif (not self.config.flush_commit_log_timed
                    and self.flusher.due(written[-1].end_offset)):
                self.flusher.wakeup()
        if self.confirm_source is None and self.appends_wake_reput:
            # a master bounds reput by its confirm offset and wakes it itself
            # (MasterRole._on_append)
            self.reput.wakeup()
        return PutResult(PutStatus.PUT_OK, tuple(appends), repeated=repeated)

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
            self.duplicates.truncate(offset)
            self.commitlog.topic_queue_table = recovery.rebuild_queue_table(
                self.commitlog, self.cq_store.queue_offset_table(), self.reput.reput_from_offset)
            self.generation += 1
            for listener in self.truncate_listeners:
                listener(offset)

    def prepare_for_writes(self) -> int:
        """A replica becoming master: cut a torn tail (a chunk that ended mid-record), flush
        (SYNC_FLUSH) and dispatch everything it holds (so its duplicate window holds every id
        it holds before its first write), and rebuild the queue offsets from it. Returns the
        end."""
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
            # reput fed the duplicate window every record it dispatched: from here on the
            # puts enter their own (a retry of a send this replica holds is a repeat)
            self.duplicates.caught_up(self.reput.reput_from_offset)
        self.ready_generation = self.generation
        return end

    # -- reading ----------------------------------------------------------------------------
    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
                     tag_expression: str | None = None, max_bytes: int | None = None, *,
                     decoded: bool = True) -> GetMessageResult:
        """`decoded` False: QueueRefs instead of records (MessageReader.get_messages)."""
        result = self.reader.get_messages(topic, queue_id, offset, max_count,
                                          TagFilter.parse(tag_expression), max_bytes,
                                          decoded=decoded)
        self.stats.get_messages += len(result.messages)
        return result

    def look_message_by_offset(self, offset: int, size: int | None = None) -> MessageRecord | None:
        """The message at commitlog `offset` (`size` bytes, when known); None when it is gone
        (retention) or not a message."""
        return self.reader.look_message_by_offset(offset, size)

    def queue_refs(self, topic: str, queue_id: int, offset: int, max_count: int) -> list[QueueRef]:
        """Where up to max_count messages of a queue from `offset` lie, read from the queue
        alone (read-ahead hints): no record is read and none counts as read in `stats`."""
        return self.reader.get_messages(topic, queue_id, offset, max_count,
                                        decoded=False).messages  # type: ignore[return-value]

    def commitlog_records(self) -> RecordReader:
        """A reader of commitlog records by offset for one run of reads, which holds each file
        once (close it, or use it as a context manager)."""
        return self.commitlog.records()

    def read_commitlog_chunk(self, offset: int, max_bytes: int, end: int | None = None) -> bytes:
        """Up to max_bytes of the commitlog from `offset`, never across a file or `end` (the
        replication's chunks). Raises OffsetOutOfRange when no file holds `offset`."""
        return self.commitlog.read_chunk(offset, max_bytes, end)

    def look_message_by_id(self, msg_id: str):
        return self.reader.look_message_by_id(msg_id)

    def query_messages(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                       end_ms: int = 2 ** 62):
        return self.reader.query_by_key(topic, key, max_num, begin_ms, end_ms)

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.reader.offset_for_timestamp(topic, queue_id, timestamp_ms)

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.cq_store.find(topic, queue_id)
        return cq.min_offset() if cq else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.cq_store.find(topic, queue_id)
        return cq.max_offset() if cq else 0

    def min_phy_offset(self) -> int:
        return self.commitlog.min_offset()

    def max_phy_offset(self) -> int:
        return self.commitlog.max_offset()

    @property
    def confirm_offset(self) -> int | None:
        source = self.confirm_source
        return None if source is None else source()

    @confirm_offset.setter
    def confirm_offset(self, value: int | None) -> None:
        """A fixed bound (tests, tools); replication installs a live `confirm_source`."""
        self.confirm_source = None if value is None else (lambda: value)

    @property
    def flushed_offset(self) -> int:
        return self.commitlog.flushed_where

    @property
    def writable(self) -> bool:
        return self.flags.writable

    @property
    def not_writable_reason(self) -> str:
        return self.flags.reason

    # -- files and queues (export, archive shipping, admin) -------------------------------------
    @property
    def commitlog_directory(self) -> str:
        return self.commitlog.queue.directory

    @property
    def commitlog_file_size(self) -> int:
        return self.commitlog.file_size

    @property
    def commitlog_truncations(self) -> int:
        """Cuts so far that may bring a commitlog file back under a name it had (a reader that
        keeps files open by name reopens them when this moves)."""
        return self.commitlog.truncations

    def commitlog_files(self) -> list[MappedFile]:
        """The commitlog's files now, oldest first: a snapshot, whose files retention or a cut
        may be removing meanwhile (MappedFile.available)."""
        return self.commitlog.queue.snapshot()

    def consume_queues(self) -> list[ConsumeQueue]:
        return self.cq_store.queues()

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.cq_store.find(topic, queue_id)

    def index_files(self) -> list[IndexFile] | list[IndexFileInfo]:
        """The index's files now, oldest first; none without messageIndexEnable."""
        return [] if self.index_service is None else self.index_service.files()

    @property
    def index_process_restarts(self) -> int | None:
        """How often the index's child process was started again after one died; None when the
        index is not built by a child process (messageIndexProcessEnable)."""
        index = self.index_service
        return index.restarts if isinstance(index, IndexProcess) else None

    @property
    def checkpoint_confirm_offset(self) -> int:
        """The confirm offset as the checkpoint last held it (loaded, then moved by dispatch):
        what a replica may serve before its master tells it more."""
        return self.checkpoint.confirm_phy_offset

    # -- dispatch (reput) ------------------------------------------------------------------------
    @property
    def dispatched_offset(self) -> int:
        """Every record below it is in its consume queue and the index."""
        return self.reput.reput_from_offset

    @property
    def dispatch_behind(self) -> int:
        """Bytes below the dispatch bound (log end, flushed and confirm offsets) not dispatched."""
        return self.reput.behind()

    def on_dispatch(self, listener: Callable[[list[DispatchRequest]], None]
                    ) -> Callable[[], None]:
        """Call `listener` with each batch of dispatched records, in reput's thread under its
        lock (so a listener takes no lock a dispatch could wait for). Returns what unsubscribes
        it (idempotent)."""
        listeners = self.reput.listeners
        listeners.append(listener)

        def unsubscribe() -> None:
            try:
                listeners.remove(listener)
            except ValueError:  # unsubscribed already
                pass
        return unsubscribe

    def wake_dispatch(self) -> None:
        """The dispatch bound moved (a slave's ack, a confirm offset): dispatch now rather than
        at reput's next idle round, up to 5 ms away."""
        self.reput.wakeup()

    # -- flush ---------------------------------------------------------------------------------
    def flush_now(self) -> None:
        """Flush everything appended so far in this thread, as the background rounds do: the
        commitlog (under SYNC_FLUSH joining the group commit as a putter does: FlushTimeout
        after syncFlushTimeout), then, unless that failed, the consume queues and the index
        with a checkpoint. A disk error is recorded as in the background (`flush_failed`)."""
        self.flusher.flush_now()
        if not self.flush_failure.failed:
            self.logics_flush.step(thorough=True, whole_index=True)

    @property
    def flush_failed(self) -> bool:
        """A flush failed, of the commitlog (`commitlog_flush_error`) or of the consume queues,
        the index or the checkpoint: final until a restart."""
        return self.flush_failure.failed or self.logics_flush.failed

    @property
    def commitlog_flush_error(self) -> DiskError | None:
        return self.flush_failure.error

    @property
    def flush_latency(self) -> LatencyHistogram:
        """Of the commitlog flushes that wrote something."""
        return self.flusher.latency

    def duplicate_window_stats(self) -> WindowStats:
        """The duplicate window's figures: ids held, repeats answered, reused ids refused,
        evictions by its bound and how far back it reaches (store/dedup/window.py)."""
        return self.duplicates.stats()

    def status(self) -> dict:
        return {
            "writable": self.writable, "reason": self.not_writable_reason,
            "min_offset": self.min_phy_offset(), "max_offset": self.max_phy_offset(),
            "flushed_offset": self.flushed_offset, "confirm_offset": self.confirm_offset,
            "dispatched_offset": self.dispatched_offset,
            "put_messages": self.stats.put_messages, "put_bytes": self.stats.put_bytes,
            "put_failures": self.stats.put_failures, "get_messages": self.stats.get_messages,
            "commitlog_files": len(self.commitlog.queue),
        }

    def reconfigure(self, config: StoreConfig) -> None:
        """Swap in `config`, which differs from the current one only in keys the running
        services read on every use (the runtime-updatable keys, the broker role). Services read
        `store.config` when they use a key, so this one assignment reaches them all. A flip
        between slave and master starts a new `generation`."""
        if config.is_slave != self.config.is_slave:
            self.generation += 1
        self.config = config

    # -- internals ---------------------------------------------------------------------------
    def _dispatch_bound(self) -> int:
        bound = self.commitlog.max_offset()
        if self.config.is_sync_flush:
            bound = min(bound, self.commitlog.flushed_where)  # RocketMQ #8240
        confirm = self.confirm_offset
        if confirm is not None:
            bound = min(bound, confirm)
            self.checkpoint.confirm_phy_offset = confirm  # persisted with the next checkpoint
        return bound

    def _on_dispatched(self, requests) -> None:
        self._last_dispatched_stamp = requests[-1].store_timestamp

    def _on_flushed(self, offset: int, stamp: int) -> None:
        if stamp:
            self._physic_stamp = stamp
        self.reput.wakeup()

    def _on_disk_error(self, error: DiskError) -> None:
        self.flags.set(rf.DISK_ERROR, str(error))


def waits_for_store(msgs: Sequence[Message]) -> bool:
    """A put waits for the flush (and, on a SYNC_MASTER, for the slaves) unless every message
    asked not to (WAIT=false): RocketMQ's PROPERTY_WAIT_STORE_MSG_OK."""
    return any(m.properties.get(codec.PROPERTY_WAIT_STORE_MSG_OK, "true") != "false" for m in msgs)


def _own_records(msgs: Sequence[Message], allow_system_topic: bool) -> bool:
    """The node's own table records (rmq_sys_*: consumer acks and offsets, topics, schedule
    progress), which the disk guards let through."""
    return allow_system_topic and all(m.topic.startswith(TABLE_TOPIC_PREFIX) for m in msgs)

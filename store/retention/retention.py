"""Retention and the disk guard: RocketMQ's CleanCommitLogService + CleanConsumeQueueService.

One `step()` (every `clean_resource_interval` ms when run as a thread) does, in order:

1. Disk guard. The used ratio (0..1) of the file systems holding the commitlog directory and
   the store root (consume queues, index) is read through an injected `DiskUsage` function;
   the highest one counts.
   - >= disk_space_warning_level_ratio/100: DISK_FULL is set (puts answer
     SERVICE_NOT_AVAILABLE with the reason) and cleaning starts at once, whatever the files' age.
   - >= disk_space_clean_forcibly_ratio/100: files are deleted whatever their age.
   - >= disk_max_used_space_ratio/100: expired files are deleted even outside the delete hour.
   Below the warning level DISK_FULL is cleared: the flag is transient, writes resume without
   a restart. (RocketMQ clears it only below the clean-forcibly level; we clear it below the
   warning level, so there is no hysteresis band.) "Whatever their age" needs
   clean_file_forcibly_enable. A failing usage probe is logged and leaves the flag as it was.
2. Commitlog deletion, when it is the delete hour (local hour of the injected clock in
   `delete_when`), the disk is over a ratio above, or a manual trigger is pending
   (`trigger_cleanup()`: the next 20 rounds, RocketMQ manualDeleteFileSeveralTimes). Oldest
   first, stopping at the first file that is young (unless forced), never the file being
   written, at most 10 files per round (deleteFileBatchMax), `delete_commit_log_files_interval`
   ms apart. A file still held by a reader is shut down but kept; it is destroyed when released,
   or forcibly once `destroy_mapped_file_interval_forcibly` ms have passed since the first
   attempt. Such "hanged" files are retried by every deletion round and, outside those, every
   `redelete_hanged_file_interval` ms.
   Ours, not RocketMQ's: a file holding records that reput has not dispatched yet is never
   deleted (they would silently be missing from the consume queues and the index).
   Ours too: `diskPressurePolicy` (store/retention/retention_guard.py). A forced deletion of a young file
   under `protect-unconsumed` needs every subscribed group to have consumed the file (or the
   archive to hold it); when it does not, deletion stops there and DISK_FULL is set from the
   clean-forcibly level on, its reason naming the groups holding the oldest file; the flag
   clears once usage is below the clean-forcibly level (consumers caught up and the file went,
   or space was freed otherwise). Every forced deletion of a young file counts the unconsumed
   messages it removed per group (`RetentionRound.unconsumed_deleted`, `unconsumed_deleted`).
   With an archive (the store's `archived_up_to` hook, cluster/archive/shipper.py), an expired
   file waits until the archive answered for it; forced cleanup under disk pressure deletes it
   anyway by the policy above, logged and counted (`RetentionRound.unarchived_deleted`), so a
   dead archive cannot fill the disk.
3. When the commitlog's min offset moved: consume queue files wholly below it are deleted and
   each queue's min offset is corrected (ConsumeQueueStore.delete_expired does both), then index
   files whose entries all lie below it.

Age of a commitlog file: `MappedFile.last_modified_ms`, the store timestamp of its last append.
Files loaded at startup have 0 there; for them the file's mtime is used (which is what RocketMQ
itself uses for every file: File.lastModified()). Under a ManualClock that mtime is real time.

What a round did is kept in `last_round` (a RetentionRound) and logged.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from store import running_flags as rf
from store.commitlog.fileio import existing_parent
from store.commitlog.mapped_file import MappedFile
from .retention_guard import DELETE_OLDEST, ConsumedView, describe_holders
from common.service import Service

if TYPE_CHECKING:
    from store.message_store import MessageStore

log = logging.getLogger(__name__)

DiskUsage = Callable[[str], float]
"""Used ratio (0..1) of the file system holding a path."""

MAX_MANUAL_DELETE_ROUNDS = 20  # RocketMQ CleanCommitLogService.MAX_MANUAL_DELETE_FILE_TIMES
DELETE_FILES_BATCH_MAX = 10  # RocketMQ deleteFileBatchMax
_HOUR_MS = 3600 * 1000


def default_disk_usage(path: str) -> float:
    """psutil's used percentage / 100 for the file system of `path` (or of its nearest
    existing parent: the commitlog directory appears only with the first write)."""
    import psutil

    return psutil.disk_usage(existing_parent(path)).percent / 100.0


def file_time_ms(f: MappedFile) -> int:
    """When a file was last written: its last append's store timestamp, else (files loaded at
    startup) its mtime; 0 when neither is known (the file is gone: treat as expired)."""
    if f.last_modified_ms:
        return f.last_modified_ms
    try:
        return int(os.path.getmtime(f.path) * 1000)
    except OSError:
        return 0


@dataclass
class RetentionRound:
    """What one step saw and did."""

    at_ms: int
    usage: float | None = None  # highest used ratio seen; None when the probe failed
    usage_path: str = ""
    disk_full: bool = False  # DISK_FULL set after this round
    time_up: bool = False  # local hour in delete_when
    space_to_delete: bool = False  # usage over disk_max_used_space_ratio (or a higher level)
    manual: bool = False  # a trigger_cleanup() round
    forced: bool = False  # files deleted regardless of age
    deleted: list[str] = field(default_factory=list)  # commitlog files deleted
    hanged: list[str] = field(default_factory=list)  # shut down but held by readers: retried
    consume_queue_files_deleted: int = 0
    index_files_deleted: int = 0
    min_offset: int = 0  # commitlog min offset after the round
    # group -> unconsumed messages removed by this round's forced deletions of young files
    unconsumed_deleted: dict[str, int] = field(default_factory=dict)
    protected: dict[str, int] = field(default_factory=dict)  # holders of the kept oldest file
    awaiting_archive: str = ""  # an expired file kept until the archive has it
    unarchived_deleted: int = 0  # files disk pressure deleted before the archive had them

    @property
    def ran(self) -> bool:
        """Whether commitlog deletion was due this round."""
        return self.time_up or self.space_to_delete or self.manual


class RetentionService(Service):
    """Retention and the disk guard of one store (the rounds of the module docstring): owns the
    DISK_FULL decisions, the deletion of commitlog, consume queue and index files, the pending
    manual rounds and the totals (`last_round`, `deleted_total`, `unconsumed_deleted`,
    `unarchived_deleted`).

    `_manual_lock` guards `_manual_rounds`, which `trigger_cleanup` sets from an admin thread.
    Everything else is written only by the service thread (`step`) and read unlocked
    (`last_round` is replaced whole, never mutated after the round)."""

    name = "retention"

    def __init__(self, store: "MessageStore", disk_usage: DiskUsage = default_disk_usage, *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__()
        self.store = store
        self.clock = store.clock
        self.disk_usage = disk_usage
        self._sleep = sleep  # pacing between deletions (delete_commit_log_files_interval)
        self._manual_rounds = 0
        self._manual_lock = threading.Lock()
        self._last_redelete_ms = 0
        self._last_physical_min_offset = 0
        self._clean_immediately = False
        self.last_round: RetentionRound | None = None
        self.deleted_total = 0
        self.unconsumed_deleted: dict[str, int] = {}  # group -> total since start
        self.unarchived_deleted = 0  # files deleted before the archive had them, since start
        self._protecting = False  # the last round kept an unconsumed file under pressure

    # -- admin ---------------------------------------------------------------------------------
    def trigger_cleanup(self, rounds: int = MAX_MANUAL_DELETE_ROUNDS) -> None:
        """Delete expired files during the next `rounds` rounds, whatever the hour
        (RocketMQ executeDeleteFilesManually). Wakes the service thread."""
        with self._manual_lock:
            self._manual_rounds = max(self._manual_rounds, rounds)
        self.wakeup()

    @property
    def manual_rounds_left(self) -> int:
        return self._manual_rounds

    @property
    def config(self):
        """The store's config as it is now: the retention keys change at runtime."""
        return self.store.config

    # -- service -------------------------------------------------------------------------------
    def wait_interval(self) -> float:
        return self.config.clean_resource_interval / 1000.0

    def step(self) -> RetentionRound:
        now = self.clock.now_ms()
        rnd = RetentionRound(at_ms=now)
        self._disk_guard(rnd)
        self._delete_commitlog_files(rnd, now)
        self._redelete_hanged(rnd, now)
        self._clean_logics(rnd, now)
        self._protect_flag(rnd)
        for g, n in rnd.unconsumed_deleted.items():
            self.unconsumed_deleted[g] = self.unconsumed_deleted.get(g, 0) + n
        self.unarchived_deleted += rnd.unarchived_deleted
        queue = self.store.commitlog.queue
        rnd.hanged = [f.path for f in queue.snapshot() if not f.available]
        rnd.min_offset = self.store.commitlog.min_offset()
        self.deleted_total += len(rnd.deleted)
        self.last_round = rnd
        return rnd

    # -- 1. disk guard -----------------------------------------------------------------------
    def _usage(self) -> tuple[float, str] | None:
        c = self.config
        best: tuple[float, str] | None = None
        for path in dict.fromkeys((c.commit_log_dir, c.store_path_root_dir)):
            try:
                ratio = float(self.disk_usage(path))
            except Exception:  # a broken probe must not stop retention
                log.warning("retention: cannot read disk usage of %s", path, exc_info=True)
                continue
            if best is None or ratio > best[0]:
                best = (ratio, path)
        return best

    def _disk_guard(self, rnd: RetentionRound) -> None:
        c = self.config
        flags = self.store.flags
        warning = c.disk_space_warning_level_ratio / 100.0
        forcibly = c.disk_space_clean_forcibly_ratio / 100.0
        max_used = c.disk_max_used_space_ratio / 100.0
        self._clean_immediately = False
        got = self._usage()
        if got is None:
            rnd.disk_full = flags.has(rf.DISK_FULL)
            return
        usage, path = got
        rnd.usage, rnd.usage_path = usage, path
        if usage >= warning:
            if not flags.has(rf.DISK_FULL):
                msg = (f"disk usage {usage:.2f} >= warning level {warning:.2f}: writes refused "
                       f"({path})")
                flags.set(rf.DISK_FULL, msg)
                log.error("retention: %s; cleaning at once", msg)
            self._clean_immediately = True
            rnd.space_to_delete = True
        else:
            if flags.has(rf.DISK_FULL) and not (self._protecting and usage >= forcibly):
                self._protecting = False
                flags.clear(rf.DISK_FULL)
                log.info("retention: disk usage %.2f < warning level %.2f (%s): writes resume",
                         usage, warning, path)
            if usage >= forcibly:
                self._clean_immediately = True
                rnd.space_to_delete = True
            elif usage >= max_used:
                rnd.space_to_delete = True
        rnd.disk_full = flags.has(rf.DISK_FULL)

    # -- 2. commitlog ------------------------------------------------------------------------
    def is_delete_time(self, now_ms: int) -> bool:
        """Whether the local hour of `now_ms` is one of delete_when's hours."""
        return time.localtime(now_ms / 1000.0).tm_hour in self.config.delete_hours()

    def _delete_commitlog_files(self, rnd: RetentionRound, now: int) -> None:
        c = self.config
        rnd.time_up = self.is_delete_time(now)
        with self._manual_lock:
            rnd.manual = self._manual_rounds > 0
            if rnd.manual:
                self._manual_rounds -= 1
        if not rnd.ran:
            return
        force = c.clean_file_forcibly_enable and self._clean_immediately
        rnd.forced = force
        reserved_ms = c.file_reserved_time * _HOUR_MS
        dispatched = self.store.reput.reput_from_offset
        pace = c.delete_commit_log_files_interval / 1000.0
        seen = 0
        view: ConsumedView | None = None

        hook = self.store.archived_up_to
        archived = hook() if hook is not None else None

        def deletable(f: MappedFile) -> bool:
            nonlocal seen, view
            end = f.file_from_offset + f.file_size
            if end > dispatched:
                return False  # holds records not in the consume queues / index yet
            young = f.available and file_time_ms(f) + reserved_ms > now
            if young and not force:
                return False  # young: stop here, never delete files in the middle
            unarchived = archived is not None and archived < end
            if unarchived and not force:
                rnd.awaiting_archive = f.path  # expired, but the archive does not have it yet
                return False
            if young:
                if view is None:
                    view = ConsumedView(self.store.cq_store, self.consumer_progress())
                if not self._may_delete_early(rnd, view, f.file_from_offset, end):
                    return False
            if unarchived:
                rnd.unarchived_deleted += 1
                log.warning("retention: disk pressure deletes %s before the archive has it "
                            "(the archive keeps a gap there)", f.path)
            if seen and pace > 0:
                self._sleep(pace)  # RocketMQ deleteCommitLogFilesInterval between files
            seen += 1
            return True

        queue = self.store.commitlog.queue
        deleted = queue.delete_first_files(deletable, DELETE_FILES_BATCH_MAX,
                                           c.destroy_mapped_file_interval_forcibly, now)
        rnd.deleted += deleted
        why = ", ".join(n for n, on in (("delete hour", rnd.time_up),
                                        ("disk usage", rnd.space_to_delete),
                                        ("manual", rnd.manual)) if on)
        for path in deleted:
            log.info("retention: deleted commitlog file %s (%s%s)", path, why,
                     ", forced" if force else "")
        first = queue.first_file
        if first is not None and not first.available:
            log.warning("retention: %s is still held by readers; retried later", first.path)
        if not deleted and rnd.space_to_delete:
            log.warning("retention: disk usage %s but no commitlog file could be deleted",
                        "unknown" if rnd.usage is None else f"{rnd.usage:.2f}")

    @property
    def consumer_progress(self):
        return self.store.consumer_progress

    def _may_delete_early(self, rnd: RetentionRound, view: ConsumedView, start: int,
                          end: int) -> bool:
        """The policy for one young file [start, end) under forced cleanup; counts what a
        deletion removes, or records the holders when the file is kept."""
        removed = view.unconsumed_below(end)
        before = view.unconsumed_below(start)
        holders = {g: n - before.get(g, 0) for g, n in removed.items()
                   if n < 0 or n - before.get(g, 0) > 0}
        # only a copy in the archive excuses deleting what a group has not read: a file the
        # archive refused counts as answered for time-based expiry, not here
        hook = self.store.archive_held_up_to
        archived = hook() if hook is not None else None
        held = bool(holders) and not (archived is not None and archived >= end)
        if held and self.config.disk_pressure_policy != DELETE_OLDEST:
            rnd.protected = holders
            return False
        if holders:
            for g, n in holders.items():
                rnd.unconsumed_deleted[g] = rnd.unconsumed_deleted.get(g, 0) + max(n, 0)
            log.warning("retention: forced deletion of %d..%d removes unconsumed messages "
                        "(%s): %s", start, end, self.config.disk_pressure_policy
                        if held else "archived", describe_holders(holders))
        return True

    def _protect_flag(self, rnd: RetentionRound) -> None:
        """protect-unconsumed: refuse writes while a kept file is all forced cleanup could
        delete; the reason names its groups."""
        if not rnd.protected:
            return
        self._protecting = True
        first = self.store.commitlog.queue.first_file
        msg = (f"disk usage {rnd.usage if rnd.usage is not None else 0:.2f} >= clean-forcibly "
               f"level {self.config.disk_space_clean_forcibly_ratio / 100:.2f} and "
               f"diskPressurePolicy=protect-unconsumed keeps the oldest commitlog file "
               f"{os.path.basename(first.path) if first else '?'}: unconsumed by "
               f"{describe_holders(rnd.protected)}: writes refused until they consume or "
               f"space is freed")
        if not self.store.flags.has(rf.DISK_FULL):
            log.error("retention: %s", msg)
        self.store.flags.update(rf.DISK_FULL, msg)
        rnd.disk_full = True

    def _redelete_hanged(self, rnd: RetentionRound, now: int) -> None:
        """RocketMQ reDeleteHangedFile: retry a first file destroyed once but still held."""
        c = self.config
        if now - self._last_redelete_ms <= c.redelete_hanged_file_interval:
            return
        self._last_redelete_ms = now
        queue = self.store.commitlog.queue
        first = queue.first_file
        if first is None or first.available:
            return
        deleted = queue.delete_first_files(lambda f: not f.available, 1,
                                           c.destroy_mapped_file_interval_forcibly, now)
        for path in deleted:
            log.info("retention: re-deleted hanged commitlog file %s", path)
        rnd.deleted += deleted

    # -- 3. consume queues and index ---------------------------------------------------------
    def _clean_logics(self, rnd: RetentionRound, now: int) -> None:
        """RocketMQ CleanConsumeQueueService: follow the commitlog's min offset."""
        store = self.store
        min_offset = store.commitlog.min_offset()
        if min_offset <= self._last_physical_min_offset:
            return
        # delete_expired also corrects every queue's min offset (correct_min_offset).
        rnd.consume_queue_files_deleted = store.cq_store.delete_expired(min_offset, now_ms=now)
        if store.index_service is not None:
            rnd.index_files_deleted = store.index_service.delete_expired(min_offset)
        self._last_physical_min_offset = min_offset
        if rnd.consume_queue_files_deleted or rnd.index_files_deleted:
            log.info("retention: commitlog min offset %d: deleted %d consume queue and %d index "
                     "files", min_offset, rnd.consume_queue_files_deleted,
                     rnd.index_files_deleted)


def attach(store: "MessageStore", disk_usage: DiskUsage = default_disk_usage,
           **kwargs) -> RetentionService:
    """Create the retention service and register it with the store, which starts and stops it
    with its other services (attach before store.start())."""
    service = RetentionService(store, disk_usage, **kwargs)
    store.retention = service
    return service

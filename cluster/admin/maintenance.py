"""Store operations of the Admin API: flush now, trigger retention, statistics.

Flush runs the store's own flush steps in the caller's thread (MessageStore.flush_now: the
commitlog flusher's round with no page threshold, then a thorough consume queue / index /
checkpoint round), so a failure is recorded exactly as a background round would record it: the
store turns not writable and stays so until a restart (a later "successful" fsync may cover
pages the kernel dropped). The call then answers INTERNAL with the disk error. Running a round
next to the service thread is safe: both only move the flushed positions forward, and
msync/fdatasync of a range twice is harmless.

Cleanup arms RetentionService's manual trigger (RocketMQ executeDeleteFilesManually: the next
20 rounds ignore deleteWhen), wakes it and waits for the first round that saw the trigger, so the
answer says what that round deleted. Files younger than fileReservedTime are kept unless the
disk is over its ratios, exactly like RocketMQ.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import grpc

from proto import admin_pb2 as pb
from store.errors import FlushTimeout
from store.retention.retention import default_disk_usage

from cluster.admin.admin_error import AdminError, invalid

if TYPE_CHECKING:
    from store.message_store import MessageStore

    from cluster.admin.admin_node import AdminNode

log = logging.getLogger(__name__)
DEFAULT_CLEANUP_WAIT_MS = 10_000
MAX_CLEANUP_WAIT_MS = 60_000


def _disk_failure(store: "MessageStore") -> AdminError:
    error = store.commitlog_flush_error
    reason = str(error) if error is not None else store.not_writable_reason
    return AdminError(grpc.StatusCode.INTERNAL,
                      f"flush failed: {reason} (the store stays not writable until a restart)")


def flush(node: "AdminNode", caller: str) -> pb.FlushResponse:
    store = node.store
    started = time.monotonic()
    if store.flush_failed:
        raise _disk_failure(store)
    # Everything appended so far, flushed by rounds like the background ones: a DiskError is
    # recorded in the store (not writable, waiters answered FLUSH_DISK_FAILED) and the
    # checkpoint's physic timestamp moves. Under SYNC_FLUSH the call joins the group commit as
    # a putter does and may time out (FlushTimeout), which is not a success.
    try:
        store.flush_now()
    except FlushTimeout as e:  # no disk error: the group commit is slow or stuck
        raise AdminError(grpc.StatusCode.DEADLINE_EXCEEDED, f"flush did not finish: {e}") from e
    if store.flush_failed:
        raise _disk_failure(store)
    took = int((time.monotonic() - started) * 1000)
    log.info("admin Flush by %s: commitlog flushed to %d in %d ms", caller, store.flushed_offset,
             took)
    return pb.FlushResponse(flushed_offset=store.flushed_offset,
                            max_offset=store.max_phy_offset(),
                            dispatched_offset=store.dispatched_offset, took_ms=took)


def trigger_cleanup(node: "AdminNode", req: pb.CleanupRequest, caller: str) -> pb.CleanupResponse:
    if not 0 <= req.wait_ms <= MAX_CLEANUP_WAIT_MS:
        raise invalid(f"wait_ms {req.wait_ms} is out of range 0..{MAX_CLEANUP_WAIT_MS}")
    store = node.store
    retention = store.retention
    if retention is None or not retention.running:
        raise AdminError(grpc.StatusCode.FAILED_PRECONDITION,
                         "the retention service is not running on this node")
    c = store.config
    log.warning("admin TriggerCleanup by %s: deleting commitlog files older than "
                "fileReservedTime=%d h now (and during the next rounds)", caller,
                c.file_reserved_time)
    before = retention.last_round
    min_before = store.min_phy_offset()
    retention.trigger_cleanup()
    deadline = time.monotonic() + (req.wait_ms or DEFAULT_CLEANUP_WAIT_MS) / 1000.0
    rnd = None
    while time.monotonic() < deadline:
        last = retention.last_round
        if last is not None and last is not before and last.manual:
            rnd = last
            break
        time.sleep(0.02)
    out = pb.CleanupResponse(min_offset_before=min_before, min_offset_after=store.min_phy_offset(),
                             manual_rounds_left=retention.manual_rounds_left, disk_usage=-1)
    if rnd is None:
        out.note = "no retention round finished in time; the trigger stays armed"
        return out
    out.round_done = True
    out.deleted_files.extend(rnd.deleted)
    out.hanged_files.extend(rnd.hanged)
    out.consume_queue_files_deleted = rnd.consume_queue_files_deleted
    out.index_files_deleted = rnd.index_files_deleted
    out.forced = rnd.forced
    if rnd.usage is not None:
        out.disk_usage = rnd.usage
    if not rnd.deleted:
        out.note = (f"nothing expired: commitlog files are kept for fileReservedTime="
                    f"{c.file_reserved_time} h, the file being written is never deleted, nor one "
                    f"holding records not dispatched yet")
    log.warning("admin TriggerCleanup by %s: deleted %d commitlog, %d consume queue and %d index "
                "files; min offset %d -> %d", caller, len(rnd.deleted),
                rnd.consume_queue_files_deleted, rnd.index_files_deleted, min_before,
                out.min_offset_after)
    return out


def _disk_usage(store: "MessageStore") -> tuple[float, str]:
    """The highest used ratio of the file systems holding the commitlog and the store root,
    read now with the retention service's probe (-1 when it fails)."""
    retention = store.retention
    probe = retention.disk_usage if retention is not None else default_disk_usage
    best, where = -1.0, ""
    for path in dict.fromkeys((store.config.commit_log_dir, store.config.store_path_root_dir)):
        try:
            ratio = float(probe(path))
        except Exception:  # noqa: BLE001 - statistics must answer even when a probe breaks
            log.warning("cannot read the disk usage of %s", path, exc_info=True)
            continue
        if ratio > best:
            best, where = ratio, path
    return best, where


def stats(node: "AdminNode") -> pb.StoreStats:
    store = node.store
    st = store.status()
    usage, usage_path = _disk_usage(store)
    out = pb.StoreStats(
        node_id=node.node_id, role=node.role.name, writable=st["writable"],
        not_writable=store.flags.reasons, min_offset=st["min_offset"],
        max_offset=st["max_offset"], flushed_offset=st["flushed_offset"],
        confirm_offset=st["confirm_offset"] or 0, dispatched_offset=st["dispatched_offset"],
        dispatch_behind_bytes=store.dispatch_behind, commitlog_files=st["commitlog_files"],
        commitlog_file_size=store.config.mapped_file_size_commit_log,
        put_messages=st["put_messages"], put_bytes=st["put_bytes"],
        put_failures=st["put_failures"], get_messages=st["get_messages"],
        disk_usage_ratio=usage, disk_usage_path=usage_path,
        store_path=store.config.store_path_root_dir)
    topics: dict[str, list[int]] = {}
    for cq in store.consume_queues():
        entry = topics.setdefault(cq.topic, [0, 0])
        entry[0] += 1
        entry[1] += max(0, cq.max_offset() - cq.min_offset())
    for name in sorted(topics):
        out.topics.append(pb.TopicStats(topic=name, queues=topics[name][0],
                                        messages=topics[name][1]))
    schedule = store.schedule
    if schedule is not None:
        out.schedule_delivered = schedule.stats.delivered
        out.schedule_backlog = sum(schedule.backlog().values())
        out.schedule_lag_ms = schedule.delivery_lag_ms()
    retention = store.retention
    if retention is not None:
        out.retention_files_deleted = retention.deleted_total
        last = retention.last_round
        out.retention_last_round_ms = last.at_ms if last is not None else 0
    return out

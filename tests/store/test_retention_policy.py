"""diskPressurePolicy (issue 17) with the stepped RetentionService and an injected disk ratio:
forced cleanup of young files keeps what a subscribed group has not consumed (and refuses
writes naming it) under protect-unconsumed, deletes and counts it under delete-oldest; unknown
progress keeps everything; a topic nobody consumes counts as consumed; an archive's hook
allows the deletion; the node's table records pass DISK_FULL, client messages do not."""
from __future__ import annotations

import pytest

from store import running_flags as rf
from store.codec import Message
from store.put_result import PutStatus
from store.retention.retention_guard import QueueConsumed
from tests.store.retention_env import Env


class Group:
    """The injected progress: group G on T/0 at `offset`, or unknown (None)."""

    def __init__(self, offset: int | None = 0) -> None:
        self.offset = offset

    def __call__(self):
        return None if self.offset is None else [QueueConsumed("G", "T", 0, self.offset)]


def pressured(tmp_path, policy: str, offset: int | None = 0) -> tuple[Env, Group, int]:
    """Three files written, disk at 0.87 (>= clean-forcibly 0.85, < warning 0.90); returns
    the env, the progress and how many messages the first file holds."""
    e = Env(tmp_path, disk_pressure_policy=policy)
    group = Group(offset)
    e.store.consumer_progress = group
    appends = e.fill_files(3)
    in_first = sum(1 for a in appends if a.wrote_offset < e.store.commitlog.files()[1].file_from_offset)
    e.disk.ratio = 0.87
    return e, group, in_first


def test_protect_keeps_unconsumed_and_refuses_naming_the_group(tmp_path):
    e, group, in_first = pressured(tmp_path, "protect-unconsumed")
    try:
        paths = e.paths()
        rnd = e.step()
        assert rnd.forced and rnd.deleted == [] and e.paths() == paths
        assert rnd.protected == {"G": in_first} and rnd.unconsumed_deleted == {}
        assert e.store.flags.has(rf.DISK_FULL)
        reason = e.store.not_writable_reason
        assert f"G ({in_first} messages)" in reason and "protect-unconsumed" in reason
        r = e.store.put_message(Message(topic="T", body=b"x", queue_id=0))
        assert r.status is PutStatus.SERVICE_NOT_AVAILABLE and "DISK_FULL" in r.reason
        # the group's acks (a table record) still go in under DISK_FULL
        ok = e.store.put_messages([Message(topic="rmq_sys_CONSUMER_STATE", body=b"ack",
                                           queue_id=0)], allow_system_topic=True)
        assert ok.status is PutStatus.PUT_OK
        half = e.store.put_messages([Message(topic="RMQ_SYS_TRANS_HALF_TOPIC", body=b"h",
                                             queue_id=0)], allow_system_topic=True)
        assert half.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert e.step().deleted == [] and e.store.flags.has(rf.DISK_FULL)  # still held
        group.offset = in_first  # the group consumed the first file
        rnd = e.step()
        assert rnd.deleted == paths[:1] and rnd.unconsumed_deleted == {}
        assert e.ret.unconsumed_deleted == {}
        e.disk.ratio = 0.5  # the deletion freed space
        e.step()
        assert e.store.writable
    finally:
        e.close()


def test_delete_oldest_deletes_and_counts(tmp_path):
    e, _, in_first = pressured(tmp_path, "delete-oldest")
    try:
        paths = e.paths()
        rnd = e.step()
        assert rnd.deleted == paths[:2]  # never the file being written
        assert rnd.unconsumed_deleted["G"] >= in_first
        assert e.ret.unconsumed_deleted == rnd.unconsumed_deleted
        assert not e.store.flags.has(rf.DISK_FULL)
    finally:
        e.close()


def test_unknown_progress_keeps_everything(tmp_path):
    e, _, _ = pressured(tmp_path, "protect-unconsumed", offset=None)
    try:
        rnd = e.step()
        assert rnd.deleted == [] and "unknown" in e.store.not_writable_reason
    finally:
        e.close()


@pytest.mark.parametrize("policy", ["protect-unconsumed", "delete-oldest"])
def test_topics_nobody_consumes_count_as_consumed(tmp_path, policy):
    e, _, _ = pressured(tmp_path, policy)
    try:
        e.store.consumer_progress = lambda: [QueueConsumed("G", "OTHER", 0, 0)]
        rnd = e.step()
        assert len(rnd.deleted) == 2 and rnd.unconsumed_deleted == {}
    finally:
        e.close()


def test_a_file_the_archive_refused_is_not_deleted_early_with_unconsumed_messages(tmp_path):
    """The archive answered for the first file but refused it (it keeps no copy): time-based
    expiry may go on, but disk pressure must not delete messages nobody read and nobody
    archived."""
    e, _, _ = pressured(tmp_path, "protect-unconsumed")
    try:
        second = e.store.commitlog.files()[1]
        e.store.archived_up_to = lambda: second.file_from_offset  # answered: refused
        e.store.archive_held_up_to = lambda: 0  # holds nothing
        rnd = e.step()
        assert rnd.deleted == [] and rnd.unconsumed_deleted == {}
        assert rnd.protected == {"G": rnd.protected["G"]} and rnd.protected["G"] > 0
    finally:
        e.close()


def test_archive_hook_allows_early_deletion(tmp_path):
    e, _, in_first = pressured(tmp_path, "protect-unconsumed")
    try:
        second = e.store.commitlog.files()[1]
        e.store.archive_held_up_to = lambda: second.file_from_offset  # the archive holds file 1
        rnd = e.step()
        assert len(rnd.deleted) == 1 and rnd.unconsumed_deleted == {"G": in_first}
        assert rnd.protected  # the second file is not archived: kept, writes refused
    finally:
        e.close()

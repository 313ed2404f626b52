"""RetentionService: delete hour, disk pressure, forced cleanup, the DISK_FULL guard, readers
holding files, manual trigger, consume queue / index following the commitlog, mtime fallback."""
from __future__ import annotations

import os

import pytest

from store import running_flags as rf
from common.clock import ManualClock
from store.codec import Message
from store.get_result import GetStatus
from store.message_store import MessageStore
from store.put_result import PutStatus
from store.retention.retention import (
    DELETE_FILES_BATCH_MAX,
    MAX_MANUAL_DELETE_ROUNDS,
    RetentionService,
    attach,
    default_disk_usage,
)

from tests.store.retention_env import (FILE, NEXT_DAY_0330, NEXT_DAY_0405, NEXT_DAY_1400,
                                      NOON, Disk, Env, local_ms, make_config)


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    yield e
    e.close()


def at(env: Env, ms: int) -> None:
    env.clock.set_ms(ms)


# -- delete hour -------------------------------------------------------------------------------
def test_expired_files_deleted_only_at_the_delete_hour(env):
    env.fill_files(4)
    paths = env.paths()
    at(env, NOON + 2 * 3600 * 1000)  # expired (1 h) but 14:00
    rnd = env.step()
    assert not rnd.time_up and not rnd.ran and rnd.deleted == []
    at(env, NEXT_DAY_0330)
    assert env.step().deleted == []
    at(env, NEXT_DAY_0405)
    rnd = env.step()
    assert rnd.time_up and not rnd.forced
    assert rnd.deleted == paths[:-1]
    assert env.paths() == paths[-1:]  # the file being written never goes
    assert all(not os.path.exists(p) for p in paths[:-1])
    assert rnd.min_offset == env.store.min_phy_offset() == 3 * FILE
    assert env.ret.last_round is rnd and env.ret.deleted_total == 3
    assert env.step().deleted == []  # nothing left to delete but the last file


def test_young_files_survive_the_delete_hour(tmp_path):
    e = Env(tmp_path, start_ms=local_ms(11, 4, 0))
    try:
        e.fill_files(3)
        e.clock.advance(59 * 60)  # 04:59: the files are 59 minutes old, reserved time 1 h
        rnd = e.step()
        assert rnd.time_up and rnd.deleted == []
        assert len(e.store.commitlog.queue) == 3
    finally:
        e.close()


def test_delete_when_with_several_hours(tmp_path):
    e = Env(tmp_path, delete_when="04;15")
    try:
        e.fill_files(2)
        at(e, local_ms(11, 15, 30))
        assert e.step().deleted and len(e.store.commitlog.queue) == 1
    finally:
        e.close()


def test_at_most_ten_files_per_round_paced(env):
    env.fill_files(DELETE_FILES_BATCH_MAX + 3)
    at(env, NEXT_DAY_0405)
    first = env.step()
    assert len(first.deleted) == DELETE_FILES_BATCH_MAX
    pace = env.store.config.delete_commit_log_files_interval / 1000
    assert env.sleeps == [pace] * (DELETE_FILES_BATCH_MAX - 1)
    second = env.step()
    assert len(second.deleted) == 2
    assert len(env.store.commitlog.queue) == 1


# -- consume queues and index follow -------------------------------------------------------------
def test_consume_queue_and_index_follow_the_commitlog(env):
    appends = env.fill_files(4)
    env.store.reput.catch_up()
    cq = env.store.cq_store.find("T", 0)
    assert env.store.min_offset_in_queue("T", 0) == 0
    assert [m.queue_offset for m in env.store.query_messages("T", "k0")] == [0]
    at(env, NEXT_DAY_0405)
    rnd = env.step()
    min_phy = env.store.min_phy_offset()
    first_kept = next(a for a in appends if a.wrote_offset >= min_phy)
    assert rnd.consume_queue_files_deleted > 0
    assert cq.mfq.min_offset() > 0  # whole consume queue files went
    new_min = env.store.min_offset_in_queue("T", 0)
    assert new_min == first_kept.queue_offset > 0
    got = env.store.get_messages("T", 0, 0)
    assert got.status is GetStatus.OFFSET_TOO_SMALL and got.next_begin_offset == new_min
    got = env.store.get_messages("T", 0, new_min)
    assert got.found and got.messages[0].physical_offset == first_kept.wrote_offset
    # The index no longer answers deleted messages; kept ones are still found.
    assert env.store.query_messages("T", "k0") == []
    assert env.store.query_messages("T", f"k{first_kept.queue_offset - 1}") == []
    kept = env.store.query_messages("T", f"k{first_kept.queue_offset}")
    assert [m.physical_offset for m in kept] == [first_kept.wrote_offset]


def test_index_files_below_the_min_offset_are_deleted(env):
    env.fill_files(DELETE_FILES_BATCH_MAX + 3)
    env.store.reput.catch_up()
    index = env.store.index_service
    before = len(index.files())
    assert before >= 2
    at(env, NEXT_DAY_0405)
    deleted = sum(env.step().index_files_deleted for _ in range(2))
    assert deleted > 0 and len(index.files()) == before - deleted
    min_phy = env.store.min_phy_offset()
    assert all(f.end_phy_offset >= min_phy for f in index.files()[:-1])


def test_files_not_yet_dispatched_are_kept(env):
    env.store.confirm_offset = 0  # reput may dispatch nothing (replication not confirmed)
    env.fill_files(3)
    env.disk.ratio = 0.87
    at(env, NEXT_DAY_0405)
    assert env.step().deleted == []
    env.store.confirm_offset = None
    assert len(env.step().deleted) == 2


# -- disk pressure -------------------------------------------------------------------------------
def test_over_max_used_ratio_deletes_expired_files_outside_the_delete_hour(env):
    env.fill_files(3)
    env.disk.ratio = 0.80  # >= disk_max_used_space_ratio 75, below forced 85
    env.clock.advance(30 * 60)  # young
    rnd = env.step()
    assert rnd.space_to_delete and not rnd.forced and rnd.deleted == []
    at(env, NEXT_DAY_1400)  # expired, not the delete hour
    rnd = env.step()
    assert not rnd.time_up and rnd.space_to_delete and len(rnd.deleted) == 2
    assert env.store.writable


def test_clean_forcibly_ratio_deletes_young_files(env):
    env.fill_files(3)
    env.disk.ratio = 0.87
    rnd = env.step()  # same instant as the writes: every file is young
    assert rnd.forced and len(rnd.deleted) == 2
    assert env.store.writable and not env.store.flags.has(rf.DISK_FULL)
    env.put(1)


def test_clean_forcibly_disabled_only_deletes_expired_files(tmp_path):
    e = Env(tmp_path, clean_file_forcibly_enable=False)
    try:
        e.fill_files(3)
        e.disk.ratio = 0.87
        rnd = e.step()
        assert rnd.space_to_delete and not rnd.forced and rnd.deleted == []
        at(e, NEXT_DAY_1400)
        assert len(e.step().deleted) == 2
    finally:
        e.close()


def test_disk_full_refuses_writes_until_usage_drops(env):
    env.fill_files(3)
    env.disk.ratio = 0.93
    rnd = env.step()
    assert rnd.disk_full and rnd.usage == 0.93
    assert rnd.forced and len(rnd.deleted) == 2  # cleaning starts at once
    end = env.store.max_phy_offset()
    r = env.store.put_message(Message(topic="T", body=b"y", properties={"KEYS": "late"}))
    assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert "disk usage 0.93 >= warning level 0.90: writes refused" in r.reason
    assert env.store.max_phy_offset() == end  # nothing written
    assert not env.store.writable and "disk" in env.store.not_writable_reason
    assert env.step().disk_full  # still full: still refused
    env.disk.ratio = 0.5
    rnd = env.step()
    assert not rnd.disk_full and env.store.writable
    env.put(1)  # without a restart


def test_between_clean_forcibly_and_warning_clears_disk_full(env):
    env.disk.ratio = 0.95
    env.step()
    assert env.store.flags.has(rf.DISK_FULL)
    env.disk.ratio = 0.87
    rnd = env.step()
    assert rnd.forced and not rnd.disk_full and env.store.writable


def test_disk_usage_checks_commitlog_and_root_and_a_failing_probe_changes_nothing(env):
    env.disk.ratio = 0.95
    env.step()
    cfg = env.store.config
    assert set(env.disk.paths) == {cfg.commit_log_dir, cfg.store_path_root_dir}
    env.disk.ratio = OSError("statvfs failed")
    rnd = env.step()
    assert rnd.usage is None and rnd.disk_full and env.store.flags.has(rf.DISK_FULL)


def test_disk_full_does_not_clear_sticky_flags(env):
    env.store.flags.set(rf.DISK_ERROR, "msync failed")
    env.disk.ratio = 0.1
    env.step()
    assert env.store.flags.has(rf.DISK_ERROR) and not env.store.writable


# -- readers holding files -----------------------------------------------------------------------
def test_held_file_is_kept_until_released(env):
    env.fill_files(3)
    first = env.store.commitlog.queue.first_file
    assert first.hold()
    at(env, NEXT_DAY_0405)
    rnd = env.step()
    assert rnd.deleted == [] and rnd.hanged == [first.path]
    assert os.path.exists(first.path) and env.store.min_phy_offset() == 0
    env.clock.advance(10)
    assert env.step().deleted == []  # still held, the forcible interval not over
    first.release()
    env.clock.advance(10)
    rnd = env.step()
    assert rnd.deleted[0] == first.path and len(rnd.deleted) == 2 and rnd.hanged == []
    assert not os.path.exists(first.path)


def test_held_file_destroyed_after_the_forcible_interval(env):
    env.fill_files(3)
    first = env.store.commitlog.queue.first_file
    first.hold()
    at(env, NEXT_DAY_0405)
    env.step()
    env.clock.advance(env.store.config.destroy_mapped_file_interval_forcibly / 1000)
    rnd = env.step()
    assert rnd.deleted[0] == first.path and not os.path.exists(first.path)
    first.release()  # the late release is harmless


def test_hanged_file_retried_outside_deletion_rounds(env):
    env.fill_files(3)
    first = env.store.commitlog.queue.first_file
    first.hold()
    at(env, local_ms(11, 4, 59))
    assert env.step().hanged == [first.path]
    cfg = env.store.config
    env.clock.advance(max(cfg.destroy_mapped_file_interval_forcibly,
                          cfg.redelete_hanged_file_interval) / 1000 + 1)  # 05:01
    rnd = env.step()
    assert not rnd.ran  # not a deletion round: the hanged-file retry did it
    assert rnd.deleted == [first.path] and not os.path.exists(first.path)
    assert env.store.min_phy_offset() == FILE


# -- manual trigger ------------------------------------------------------------------------------
def test_manual_trigger_deletes_expired_files_outside_the_delete_hour(env):
    env.fill_files(3)
    at(env, NEXT_DAY_1400)
    assert env.step().deleted == []
    env.ret.trigger_cleanup()
    rnd = env.step()
    assert rnd.manual and not rnd.time_up and not rnd.forced and len(rnd.deleted) == 2
    assert env.ret.manual_rounds_left == MAX_MANUAL_DELETE_ROUNDS - 1


def test_manual_trigger_keeps_young_files_and_runs_out(env):
    env.fill_files(3)
    env.ret.trigger_cleanup(rounds=2)
    assert env.step().deleted == [] and env.step().manual
    at(env, NEXT_DAY_1400)
    rnd = env.step()
    assert not rnd.manual and rnd.deleted == []


# -- files loaded at startup ---------------------------------------------------------------------
def test_loaded_files_age_by_mtime(tmp_path):
    e = Env(tmp_path)
    e.fill_files(4)
    e.close()
    clock = ManualClock(NEXT_DAY_0405)
    # auto_services=False: the stepped service below is the only one deleting files.
    store = MessageStore(make_config(tmp_path), clock=clock, auto_services=False)
    store.start()
    try:
        ret = RetentionService(store, Disk(), sleep=lambda s: None)
        files = store.commitlog.files()
        assert all(f.last_modified_ms == 0 for f in files[:-1])
        # Real mtimes are "now", later than the manual clock: nothing is expired.
        assert ret.step().deleted == []
        old = (NOON / 1000, NOON / 1000)
        os.utime(files[0].path, old)
        os.utime(files[1].path, old)
        rnd = ret.step()
        assert rnd.deleted == [files[0].path, files[1].path]  # stops at the first young file
        assert store.min_offset_in_queue("T", 0) > 0
    finally:
        store.shutdown()


# -- wiring --------------------------------------------------------------------------------------
def test_attach_registers_with_the_store_lifecycle(tmp_path):
    store = MessageStore(make_config(tmp_path, clean_resource_interval=60_000),
                         clock=ManualClock(NOON))
    ret = attach(store, Disk())
    assert store.retention is ret and ret.wait_interval() == 60.0
    store.start()
    try:
        assert store.retention is ret and ret.running  # start() attached no default beside it
        assert store.schedule is not None and store.schedule.running
    finally:
        store.shutdown()
    assert not ret.running


def test_default_disk_usage_on_a_missing_directory(tmp_path):
    ratio = default_disk_usage(str(tmp_path / "not" / "yet"))
    assert 0.0 <= ratio <= 1.0

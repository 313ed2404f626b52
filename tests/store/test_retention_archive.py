"""Retention with an archive (the store's archived_up_to hook): expired files wait until the
archive answered for them; disk pressure deletes them anyway and counts them."""
from __future__ import annotations

from tests.store.retention_env import FILE, NEXT_DAY_0405, Env


def test_expired_files_wait_for_the_archive_and_pressure_does_not(tmp_path):
    env = Env(tmp_path)
    env.fill_files(4)
    env.store.reput.catch_up()
    archived = [0]
    env.store.archived_up_to = lambda: archived[0]
    env.clock.set_ms(NEXT_DAY_0405)  # the delete hour, all three sealed files expired
    rnd = env.ret.step()
    assert rnd.deleted == [] and rnd.awaiting_archive.endswith("00000000000000000000")
    archived[0] = FILE  # the archive has the first file
    rnd = env.ret.step()
    assert len(rnd.deleted) == 1 and rnd.unarchived_deleted == 0
    env.store.archived_up_to = lambda: None  # this node does not ship now: no waiting
    rnd = env.ret.step()
    assert len(rnd.deleted) == 2 and rnd.unarchived_deleted == 0
    env.fill_files(6)
    env.store.reput.catch_up()
    env.store.archived_up_to = lambda: FILE  # the archive is stuck at the first file
    env.disk.ratio = 0.95  # forced cleanup: the archive cannot hold the disk hostage
    rnd = env.ret.step()
    assert rnd.deleted and rnd.unarchived_deleted == len(rnd.deleted)
    assert env.ret.unarchived_deleted == len(rnd.deleted)  # the total the metrics export
    env.store.shutdown()

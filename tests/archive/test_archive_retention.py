"""The archive's own retention and the shipping plan, stepped by hand: expiry in the delete
hour, disk pressure deleting the oldest files, mixed mode waiting for the next archive."""
from __future__ import annotations

import zlib

import pytest

from common.crc import crc32c
from common.clock import ManualClock

from cluster.archive.archive import Archive
from cluster.archive.archive_config import ArchiveConfig
from cluster.archive.archive_retention import ArchiveRetention
from cluster.archive.ship_plan import (LocalFile, ShipRules, Verdict, held_up_to, next_to_ship,
                                       released_up_to)
from cluster.archive.upload import UploadHeader
from cluster.security.member_gate import MemberCredentials
from tests.store.retention_env import FILE, NEXT_DAY_0405, NEXT_DAY_1400, NOON, Disk, Env

H = 3600 * 1000


def test_the_oldest_due_file_ships_first_and_verdicts_release_retention():
    files = [LocalFile(0, 10, NOON, True), LocalFile(10, 10, NOON + H, True),
             LocalFile(20, 10, NOON + 2 * H, False)]
    rules = ShipRules(reserved_hours=3, ahead_hours=1)
    assert next_to_ship(files, {}, NOON + H, rules) is None  # due at NOON + 2 h
    assert next_to_ship(files, {}, NOON + 2 * H, rules) == files[0]
    assert next_to_ship(files, {}, NOON, rules, pressure=True) == files[0]
    assert next_to_ship(files, {}, NOON, rules, requested_up_to=10) == files[0]
    assert next_to_ship(files, {0: Verdict.HELD}, NOON + 10 * H, rules) == files[1]
    done = {0: Verdict.HELD, 10: Verdict.REFUSED}
    assert next_to_ship(files, done, NOON + 10 * H, rules) is None  # the last is not sealed
    assert next_to_ship(files, {}, NOON, ShipRules(3, 1, ship_all=True)) == files[0]
    assert released_up_to(files, {}) == 0
    assert released_up_to(files, {0: Verdict.HELD}) == 10
    assert released_up_to(files, {10: Verdict.HELD}) == 0  # the run starts at the oldest file
    assert released_up_to(files, done) == 20
    # the archive answered for both files but holds only the first: no copy of the second
    assert held_up_to(files, done) == 10
    assert held_up_to(files, {0: Verdict.REFUSED, 10: Verdict.HELD}) == 0
    with pytest.raises(ValueError):
        ShipRules(-1, 0)


@pytest.fixture
def held(tmp_path):
    """An archive holding the 3 sealed files of a store written at NOON (1 h retention)."""
    env = Env(tmp_path / "node", file_reserved_time=1)
    env.fill_files(4)
    clock = ManualClock(NOON)
    archive = Archive(str(tmp_path / "archive"), clock)
    for f in env.store.commitlog.queue.snapshot()[:-1]:
        data = bytes(f.view[:FILE])
        archive.receive(UploadHeader("g", f.file_from_offset, FILE, 0, crc32c(data), "zlib"),
                        iter([(zlib.compress(data), FILE, crc32c(data))]))
    archive.index_all()
    env.store.shutdown()
    yield archive, clock
    archive.close()


def retention(archive, clock, disk, **changes) -> ArchiveRetention:
    config = ArchiveConfig(store_path=archive.root, cluster_secret="s" * 16,
                           file_reserved_time=1, **changes)
    return ArchiveRetention(archive, config, clock, MemberCredentials(b"s" * 16, "archive"),
                            disk)


def test_expired_files_go_in_the_delete_hour_and_pressure_takes_the_oldest(held):
    archive, clock = held
    disk = Disk(0.5)
    r = retention(archive, clock, disk)
    g = archive.group("g")
    assert r.step() == 0 and len(g.entries) == 3  # young
    clock.set_ms(NEXT_DAY_1400)
    assert r.step() == 0  # expired, but 14:00 is not the delete hour (04)
    disk.ratio = 0.80  # over diskMaxUsedSpaceRatio (75): the oldest goes, expired or not
    first_key = "k0"
    assert [m.queue_offset for m in g.query_messages("T", first_key)] == [0]
    assert r.step() == 3  # the ratio stays high: every file goes
    assert g.entries == [] and g.query_messages("T", first_key) == []
    assert g.cq_store.find("T", 0).min_offset() == g.cq_store.find("T", 0).max_offset()


def test_mixed_mode_waits_for_the_next_archive_unless_the_disk_is_full(held):
    archive, clock = held
    disk = Disk(0.5)
    # the next archive is not there: nothing is forwarded
    r = retention(archive, clock, disk, forward_address="127.0.0.1:9")
    clock.set_ms(NEXT_DAY_0405)
    assert r.step() == 0 and len(archive.group("g").entries) == 3
    assert r.forwarders["g"].step() is None  # shipping fails: UNAVAILABLE, retried later
    disk.ratio = 0.9
    assert r.step() == 3 and r.unforwarded_deleted == 3

"""The `delay_while:<ms>:<path>` failpoint action and the `fileio.slow` failpoint: a slow disk
for the gray-failure drills. The sleeps are recorded, not timed (tests never assert on wall
time)."""
from __future__ import annotations

import pytest

from common import failpoints
from common.config_values import ConfigError
from store.commitlog.fileio import SLOW_FAILPOINT, FileIO
from store.commitlog.mapped_file import MappedFile


@pytest.fixture(autouse=True)
def disarmed():
    failpoints.configure("")
    yield
    failpoints.configure("")


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    seen: list[float] = []
    monkeypatch.setattr(failpoints.time, "sleep", seen.append)
    return seen


def test_delay_while_sleeps_only_while_the_trigger_exists(tmp_path, sleeps):
    trigger = tmp_path / "slow"
    failpoints.configure(f"x=delay_while:200:{trigger}")
    failpoints.io_delay("x")
    failpoints.io_delay("unarmed")
    assert sleeps == []
    trigger.touch()
    failpoints.io_delay("x")
    assert sleeps == [0.2]
    trigger.unlink()
    failpoints.io_delay("x")
    assert sleeps == [0.2]


@pytest.mark.parametrize("item", ["d=delay_while:", "d=delay_while:200", "d=delay_while:x:/t",
                                  "d=delay_while:200:relative/path"])
def test_delay_while_needs_ms_and_an_absolute_trigger(item):
    with pytest.raises(ConfigError, match="delay_while needs"):
        failpoints.configure(item)


def test_a_slow_disk_delays_write_side_operations_and_writes_into_a_mapping(tmp_path, sleeps):
    trigger = tmp_path / "slowdisk"
    failpoints.configure(f"{SLOW_FAILPOINT}=delay_while:200:{trigger}")
    path = str(tmp_path / "00000000000000000000")
    mf = MappedFile(path, 64 * 1024, FileIO(), create=True)
    try:
        mf.append_many([b"a" * 100])
        assert sleeps == []
        trigger.touch()
        mf.append_many([b"b" * 100])          # copied into the mapping
        assert sleeps == [0.2]
        mf.flush()                            # msync
        assert sleeps == [0.2, 0.2]
        assert mf.pread(100, 1) == b"b"  # a read is not slowed
        assert sleeps == [0.2, 0.2]
    finally:
        trigger.unlink()
        mf.close()

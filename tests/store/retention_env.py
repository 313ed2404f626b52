"""A MessageStore with tiny files under a ManualClock, a stepped RetentionService and an
injected disk ratio: the retention tests' environment (test_retention, test_retention_policy)."""
from __future__ import annotations

import time

from common.clock import ManualClock
from store.codec import Message
from store.config import StoreConfig
from store.message_store import MessageStore
from store.put_result import PutStatus
from store.retention.retention import RetentionService

FILE = 4096 * 4


def local_ms(day: int, hour: int, minute: int = 0) -> int:
    """Milliseconds of a local wall-clock time (January 2024), whatever the machine's zone."""
    return int(time.mktime((2024, 1, day, hour, minute, 0, 0, 0, -1)) * 1000)


NOON = local_ms(10, 12)
NEXT_DAY_0330 = local_ms(11, 3, 30)
NEXT_DAY_0405 = local_ms(11, 4, 5)
NEXT_DAY_1400 = local_ms(11, 14)


class Disk:
    """An injected DiskUsage: one ratio for every path, changed by the test."""

    def __init__(self, ratio: float = 0.1) -> None:
        self.ratio = ratio
        self.paths: list[str] = []

    def __call__(self, path: str) -> float:
        self.paths.append(path)
        if isinstance(self.ratio, Exception):
            raise self.ratio
        return self.ratio


def make_config(tmp_path, **changes) -> StoreConfig:
    base = dict(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=FILE,
                mapped_file_size_consume_queue=20 * 20, max_hash_slot_num=64, max_index_num=256,
                file_reserved_time=1, delete_when="04", flush_disk_type="ASYNC_FLUSH")
    base.update(changes)
    return StoreConfig(**base)


class Env:
    def __init__(self, tmp_path, start_ms: int = NOON, **changes) -> None:
        self.clock = ManualClock(start_ms)
        # auto_services=False: no default RetentionService thread probing the real disk and
        # clearing the flags this test's stepped service sets from its fake disk.
        self.store = MessageStore(make_config(tmp_path, **changes), clock=self.clock,
                                  auto_services=False)
        self.store.start()  # clears NOT_STARTED; retention is stepped by hand (not attached)
        self.disk = Disk()
        self.sleeps: list[float] = []
        self.ret = RetentionService(self.store, self.disk, sleep=self.sleeps.append)
        self.n = 0

    def put(self, count: int) -> list:
        out = []
        for _ in range(count):
            r = self.store.put_message(Message(topic="T", body=b"x" * 500, queue_id=0,
                                               properties={"TAGS": "a", "KEYS": f"k{self.n}"}))
            assert r.status is PutStatus.PUT_OK, r
            out.append(r.appends[0])
            self.n += 1
        return out

    def fill_files(self, files: int) -> list:
        """Put messages until the commitlog has `files` files; the last one partly written."""
        out = []
        while len(self.store.commitlog.queue) < files:
            out += self.put(1)
        out += self.put(2)
        return out

    def step(self):
        self.store.reput.catch_up()
        return self.ret.step()

    def paths(self) -> list[str]:
        return [f.path for f in self.store.commitlog.files()]

    def close(self) -> None:
        self.store.shutdown()

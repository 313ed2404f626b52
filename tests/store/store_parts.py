"""The store's parts wired by hand (no MessageStore, no threads): a commitlog, consume queues and
an index with tiny files under tmp_path, the ReputService feeding them and the MessageReader
reading them back. Tests drive reput with step()."""
from __future__ import annotations

import os

from store import codec
from common.clock import ManualClock
from store.codec import Message, SysFlag
from store.codec.dispatch import delay_level_lookup
from store.commitlog.commitlog import CommitLog
from store.queue.consume_queue_store import ConsumeQueueStore
from store.commitlog.fileio import FileIO
from store.index.index_service import IndexService
from store.layout import StoreLayout
from store.put_result import AppendResult
from store.reader import MessageReader
from store.reput import ReputService

COMMITLOG_FILE = 4096  # a few records per file: rolling (BLANK) happens all the time
CQ_FILE = 20 * 8
T0 = 1_700_000_000_000
DELAY_LEVELS = (1000, 5000)


delay_level_ms = delay_level_lookup(DELAY_LEVELS)


def message(i: int, topic: str = "Orders", queue_id: int = 0, *, tag: str | None = None,
            keys: str | None = None, sys_flag: int = 0, body: bytes | None = None) -> Message:
    props = {codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"UNIQ{i:028d}"}
    props[codec.PROPERTY_TAGS] = tag if tag is not None else ("TagA" if i % 2 else "TagB")
    props[codec.PROPERTY_KEYS] = keys if keys is not None else f"k{i}"
    return Message(topic, body if body is not None else b"body-%04d" % i + b"." * 100, queue_id,
                   props, sys_flag=sys_flag, born_timestamp=T0)


class Parts:
    """commitlog + consume queues + index + reput (bound: `self.bound`, None = unbounded) +
    reader, over real files in `root`."""

    def __init__(self, root, *, index: bool = True) -> None:
        paths = StoreLayout(str(root))
        self.clock = ManualClock(T0)
        self.io = FileIO()
        self.commitlog = CommitLog(paths.commitlog_dir, COMMITLOG_FILE, self.io, self.clock)
        self.cq_store = ConsumeQueueStore(paths.consume_queue_dir, CQ_FILE, self.io)
        self.index = (IndexService(paths.index_dir, 16, 64, self.io, self.clock)
                      if index else None)
        self.bound: int | None = None
        dispatchers = [self.cq_store] + ([self.index] if self.index else [])
        self.reput = ReputService(self.commitlog, dispatchers, delay_level_ms,
                                  bound=lambda: self.commitlog.max_offset() if self.bound is None
                                  else self.bound)
        self.reader = MessageReader(self.commitlog, self.cq_store, self.index,
                                    max_bytes=1 << 20, max_count=64)
        os.makedirs(paths.root, exist_ok=True)

    def put(self, msg: Message) -> AppendResult:
        self.clock.advance(1)  # one second per message
        return self.commitlog.put(codec.encode(msg), msg.topic, msg.queue_id)

    def put_all(self, msgs) -> list[AppendResult]:
        return [self.put(m) for m in msgs]

    def units(self, topic: str, queue_id: int) -> list[tuple[int, int, int, int]]:
        cq = self.cq_store.find(topic, queue_id)
        return [] if cq is None else list(cq.iter_units(0, 1 << 20))

    def close(self) -> None:
        self.commitlog.close()
        self.cq_store.close()
        if self.index is not None:
            self.index.close()


PREPARED = SysFlag.TRANSACTION_PREPARED_TYPE
ROLLBACK = SysFlag.TRANSACTION_ROLLBACK_TYPE
COMMIT = SysFlag.TRANSACTION_COMMIT_TYPE

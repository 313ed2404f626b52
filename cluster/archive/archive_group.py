"""One broker group's part of an archive: its commitlog files (gaps allowed), the consume
queues and the index rebuilt over them ("reput"), and the catalog of what it holds.

    <archive root>/<group>/commitlog/<20-digit offset>   the files as the broker had them
    <archive root>/<group>/consumequeue/, index/          the store's own formats, rebuilt
    <archive root>/<group>/archive.json                   the catalog (below)

The consume queues and the index are the store's own classes, fed by the store's one
commitlog walk and dispatch decoding; reads go through the store's MessageReader over an
ArchivedCommitLog. So a message has the same physical offset, message id and queue offset here
as it had on the broker, and the Admin API's lookups (cluster/admin/message_lookup.py) answer
here unchanged.

Catalog (`archive.json`, rewritten atomically after each change):

    {"files": [{"offset": int, "size": int, "crc32c": int, "records": int,
                "first_store_timestamp": ms, "last_store_timestamp": ms,
                "archived_at_ms": ms, "indexed": bool}, ...]}   in offset order
    (records and the timestamps are 0 until the file is indexed)

A file enters the catalog as soon as it is stored (fsynced, renamed): the archive acknowledges it
then. Its records are dispatched afterwards, in offset order, by the archive's indexer
(`index_next`); the entry says `indexed` once the queues and index were flushed. A crash before
that dispatches the file again (dispatching a record twice writes nothing new); a file on disk
without a catalog entry (a crash between rename and catalog) is entered at load.

Locking: `lock` serialises the writers (receiving a file, deleting the oldest); readers use
the commitlog's, queues' and index's own locks.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import asdict, dataclass, replace
from typing import Iterable

from store import codec
from common.clock import Clock
from store.commitlog.commitlog_walk import CommitLogWalk, Stop
from store.config import StoreConfig
from store.queue.consume_queue import ConsumeQueue
from store.queue.consume_queue_store import ConsumeQueueStore
from store.codec.dispatch import delay_level_lookup, request_from_fields
from store.commitlog.fileio import DEFAULT_FILE_IO
from store.get_result import GetMessageResult
from store.index.index_service import IndexService
from store.layout import StoreLayout, offset_file_name
from store.reader import MessageReader, TagFilter

from cluster.archive.archived_commitlog import ArchivedCommitLog
from cluster.archive.upload import file_crc32c

log = logging.getLogger(__name__)

CATALOG = "archive.json"


@dataclass(frozen=True)
class ArchivedFileEntry:
    """One catalog entry of archive.json: a file's offset, size and CRC-32C, and once it is
    indexed its record count and store-time range."""

    offset: int
    size: int
    crc32c: int
    records: int
    first_store_timestamp: int
    last_store_timestamp: int
    archived_at_ms: int
    indexed: bool = False

    @property
    def end(self) -> int:
        return self.offset + self.size


class ArchiveGroup:
    """One broker group's files in the archive (the module docstring): owns its
    ArchivedCommitLog, the consume queues and index rebuilt over it, the catalog entries
    (`entries`, mirrored in archive.json) and a MessageReader for the lookups.

    `lock` (an RLock) serialises the writers: storing a file, indexing the next one,
    deleting the oldest. Readers take no group lock: they go through the commitlog's,
    queues' and index's own locks, and read `entries` as one list reference (replaced
    whole by every change)."""

    def __init__(self, root: str, name: str, clock: Clock) -> None:
        self.name = name
        self.dir = os.path.join(root, name)
        self.paths = StoreLayout(self.dir)
        self.clock = clock
        self.lock = threading.RLock()
        self.commitlog = ArchivedCommitLog(self.paths.commitlog_dir)
        self.cq_store = ConsumeQueueStore(self.paths.consume_queue_dir)
        self.index = IndexService(self.paths.index_dir, clock=clock)
        defaults = StoreConfig()
        self._delay_level_ms = delay_level_lookup(defaults.delay_levels_ms())
        self.reader = MessageReader(self.commitlog, self.cq_store, self.index,
                                    max_bytes=defaults.max_transfer_bytes_on_message_in_memory,
                                    max_count=defaults.max_transfer_count_on_message_in_memory)
        self.entries: list[ArchivedFileEntry] = []

    # -- loading ------------------------------------------------------------------------
    def load(self) -> None:
        os.makedirs(self.paths.commitlog_dir, exist_ok=True)
        self.commitlog.load()
        self.cq_store.load()
        self.cq_store.recover()
        self.index.load(True, 0)
        self.entries = self._read_catalog()
        known = {e.offset for e in self.entries}
        for f in self.commitlog.files():
            if f.base not in known:  # stored, but the crash came before the catalog
                log.warning("archive %s: %s has no catalog entry: entering it", self.name,
                            f.name)
                self.stored(f.base, f.size, None)

    def _read_catalog(self) -> list[ArchivedFileEntry]:
        path = os.path.join(self.dir, CATALOG)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return []
        entries = [ArchivedFileEntry(**e) for e in data["files"]]
        return [e for e in entries if self.commitlog.holds(e.offset)]

    def _write_catalog(self) -> None:
        data = json.dumps({"files": [asdict(e) for e in self.entries]}, indent=1)
        DEFAULT_FILE_IO.write_file_atomic(os.path.join(self.dir, CATALOG), data.encode())

    # -- what the archive holds ----------------------------------------------------------
    def entry(self, offset: int) -> ArchivedFileEntry | None:
        for e in self.entries:
            if e.offset == offset:
                return e
        return None

    @property
    def newest_offset(self) -> int:
        return self.entries[-1].offset if self.entries else -1

    def time_range(self) -> tuple[int, int]:
        """(first, last) store timestamp of the messages held; (0, 0) when none."""
        stamps = [e for e in self.entries if e.indexed and e.records]
        if not stamps:
            return 0, 0
        return (min(e.first_store_timestamp for e in stamps),
                max(e.last_store_timestamp for e in stamps))

    # -- writing ------------------------------------------------------------------------
    def stored(self, offset: int, size: int, crc: int | None) -> ArchivedFileEntry:
        """A file now under its final name: map it and enter it in the catalog (not yet
        indexed)."""
        with self.lock:
            path = os.path.join(self.paths.commitlog_dir, offset_file_name(offset))
            self.commitlog.add(path, offset)
            entry = ArchivedFileEntry(offset, size, file_crc32c(path) if crc is None else crc,
                                      0, 0, 0, self.clock.now_ms())
            self._replace(entry)
            return entry

    def _replace(self, entry: ArchivedFileEntry) -> None:
        self.entries = sorted([e for e in self.entries if e.offset != entry.offset] + [entry],
                              key=lambda e: e.offset)
        self._write_catalog()

    def index_next(self) -> ArchivedFileEntry | None:
        """Reput of the oldest file not indexed yet: its records into the consume queues and
        the index, both flushed, then the entry marked indexed. None when all are."""
        with self.lock:
            pending = next((e for e in self.entries if not e.indexed), None)
            if pending is None:
                return None
            records, first, last = self._dispatch(pending.offset)
            self.cq_store.flush()
            self.index.flush()
            entry = replace(pending, records=records, first_store_timestamp=first,
                            last_store_timestamp=last, indexed=True)
            self._replace(entry)
            log.info("archive %s: indexed %s (%d records, store time %d..%d)", self.name,
                     offset_file_name(entry.offset), records, first, last)
            return entry

    def _dispatch(self, offset: int) -> tuple[int, int, int]:
        """Reput of one file: (records, first and last store timestamp)."""
        f = next(x for x in self.commitlog.files() if x.base == offset)
        walk = CommitLogWalk(decode=codec.dispatch_fields)
        count, first, last = 0, 0, 0
        for phy, fields in walk.file(f.view, f.base, 0, f.size, f.size):
            req = request_from_fields(fields, phy, self._delay_level_ms)
            if req.dispatchable:
                self.cq_store.dispatch(req)
                self.index.dispatch(req)
            count += 1
            first = first or req.store_timestamp
            last = req.store_timestamp
        if walk.stop is Stop.CORRUPT:
            log.error("archive %s: %s has a corrupt record at %d: the records after it are not "
                      "indexed", self.name, f.name, walk.offset)
        return count, first, last

    def delete_oldest(self) -> ArchivedFileEntry | None:
        """The archive's own retention: remove the oldest file, then the queue and index files
        wholly below the new first file."""
        with self.lock:
            if not self.entries:
                return None
            entry = self.entries[0]
            self.commitlog.remove_first()
            self.entries = self.entries[1:]
            self._write_catalog()
            min_offset = self.commitlog.min_offset() if self.entries else entry.end
            self.cq_store.delete_expired(min_offset, now_ms=self.clock.now_ms())
            self.index.delete_expired(min_offset)
            return entry

    def close(self) -> None:
        self.cq_store.flush()
        self.index.flush()
        self.cq_store.close()
        self.index.close()
        self.commitlog.close()

    # -- reading: what cluster/admin/message_lookup asks of a store ------------------------
    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
                     tag_expression: str | None = None) -> GetMessageResult:
        return self.reader.get_messages(topic, queue_id, offset, max_count,
                                        TagFilter.parse(tag_expression))

    def look_message_by_offset(self, offset: int):
        return self.reader.look_message_by_offset(offset)

    def query_messages(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                       end_ms: int = 2 ** 62):
        return self.reader.query_by_key(topic, key, max_num, begin_ms, end_ms)

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.reader.offset_for_timestamp(topic, queue_id, timestamp_ms)

    def min_phy_offset(self) -> int:
        return self.commitlog.min_offset()

    def max_phy_offset(self) -> int:
        return self.commitlog.max_offset()

    def consume_queues(self) -> list[ConsumeQueue]:
        return self.cq_store.queues()

    def topics(self) -> list[str]:
        return sorted({cq.topic for cq in self.consume_queues()})


def group_names(root: str) -> Iterable[str]:
    """The groups of an archive root: its directories holding a commitlog directory."""
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    return [n for n in names if os.path.isdir(os.path.join(root, n, "commitlog"))]

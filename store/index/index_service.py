"""The message index (RocketMQ IndexService): a run of IndexFiles, oldest first, the last one
being written. It is reput's index Dispatcher and answers key lookups.

- dispatch: indexes `topic#uniqKey` and `topic#key` for each space-separated key of a record;
  a full file rolls over to a new one that begins where the previous ended.
- query: walks the files newest first, returns commitlog offsets (de-duplicated, newest first).
- load: after an abnormal exit, files whose endTimestamp is past the checkpoint's
  indexMsgTimestamp may hold entries that never reached disk; they are deleted (RocketMQ) and
  rebuilt by re-dispatch.
- flush: the logics flush's rounds msync the full files and stamp the checkpoint with the
  newest one's end; the file being written is flushed at shutdown (RocketMQ's IndexService).
- truncate_dirty: when the commitlog is cut, files wholly past the cut are deleted and the file
  straddling it loses exactly its entries at or past the cut (IndexFile.truncate_from), so
  re-dispatch from the cut rebuilds the same index.

Locking: `_write_lock` serialises the writers (dispatch, truncation, retention, load);
`_list_lock` guards the list only, so a query copies it and then reads files under
hold()/release() while dispatch goes on.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Sequence

from common.clock import SYSTEM_CLOCK, Clock
from store.codec import KEY_SEPARATOR
from store.codec.dispatch import DispatchRequest
from store.errors import CorruptFile
from store.commitlog.fileio import DEFAULT_FILE_IO, FileIO
from .index_file import IndexFile, index_file_size, initial_index_file_size, is_grown_size
from store.layout import index_file_name, is_index_file_name, parse_index_file_name

log = logging.getLogger(__name__)

DEFAULT_HASH_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 20_000_000
DESTROY_INTERVAL_FORCIBLY_MS = 3000  # RocketMQ IndexService.deleteExpiredFile: destroy(3000)


# (topic#key, commitlog offset, store timestamp): what one key of one record adds
IndexEntry = tuple[str, int, int]


def build_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


def index_entries(requests: Sequence[DispatchRequest]) -> list[IndexEntry]:
    """The entries of `requests` (in commitlog order): topic#UNIQ_KEY and topic#KEY for each
    space-separated key; prepared and rollback transaction records have none."""
    entries: list[IndexEntry] = []
    add = entries.append
    for request in requests:
        if not request.dispatchable:
            continue
        uniq = request.uniq_key
        keys_text = request.keys
        if not uniq and not keys_text:
            continue
        prefix = request.topic + "#"  # build_key, inlined: two keys per message on reput
        phy, ts = request.commit_log_offset, request.store_timestamp
        if uniq:
            add((prefix + uniq, phy, ts))
        if keys_text:
            for k in keys_text.split(KEY_SEPARATOR):
                if k:
                    add((prefix + k, phy, ts))
    return entries


class IndexService:
    """The run of IndexFiles of one store's index directory, oldest first (see the module
    docstring): owns the file list, dispatches records' keys into the last file, rolls full
    files over, answers queries, deletes expired files and truncates after a commitlog cut.

    `_write_lock` (an RLock) serialises the writers (load, put, delete_expired,
    truncate_dirty, close); `_list_lock` guards `_files` only, so `query` and `flush` copy the
    list and read the files unlocked, each under hold()/release()."""

    def __init__(self, index_dir: str, hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
                 index_num: int = DEFAULT_INDEX_NUM, io: FileIO = DEFAULT_FILE_IO,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.index_dir = index_dir
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.io = io
        self.clock = clock
        self._files: list[IndexFile] = []
        self._list_lock = threading.Lock()
        self._write_lock = threading.RLock()

    def files(self) -> list[IndexFile]:
        with self._list_lock:
            return list(self._files)

    # -- loading ----------------------------------------------------------------------------
    def load(self, last_exit_ok: bool, index_msg_timestamp: int) -> list[str]:
        """Map the existing files in name order. Returns notes on what was removed."""
        notes: list[str] = []
        if not os.path.isdir(self.index_dir):
            return notes
        names = sorted(n for n in os.listdir(self.index_dir)
                       if is_index_file_name(n))
        lowest = initial_index_file_size(self.hash_slot_num, self.index_num)
        loaded: list[IndexFile] = []
        with self._write_lock:
            for i, name in enumerate(names):
                path = os.path.join(self.index_dir, name)
                size = os.path.getsize(path)
                if size < lowest and i == len(names) - 1:
                    # creation interrupted before preallocation ended
                    self._unlink(path)
                    notes.append(f"removed {path}: {size} bytes, an interrupted creation")
                    continue
                if not is_grown_size(size, self.hash_slot_num, self.index_num):
                    raise CorruptFile(f"{path} has {size} bytes, expected {lowest}.."
                                      f"{index_file_size(self.hash_slot_num, self.index_num)}")
                f = IndexFile(path, self.hash_slot_num, self.index_num, self.io)
                if not last_exit_ok and f.end_timestamp > index_msg_timestamp:
                    # Entries newer than the last index flush may be torn: rebuild them.
                    f.destroy(0, 0)
                    notes.append(f"removed {path}: endTimestamp {f.end_timestamp} is past "
                                 f"the checkpoint's {index_msg_timestamp}")
                    continue
                loaded.append(f)
            if len(loaded) < len(names):
                self.io.fsync_dir(self.index_dir)
            with self._list_lock:
                self._files = loaded
        return notes

    def _unlink(self, path: str) -> None:
        self.io.unlink(path)
        self.io.fsync_dir(self.index_dir)

    # -- writing ----------------------------------------------------------------------------
    def _new_file(self, prev: IndexFile | None) -> IndexFile:
        """Create the next file, named by the clock but always after the previous name (two
        files created within one millisecond, or a clock stepped back, must still sort)."""
        ms = self.clock.now_ms()
        if prev is not None and index_file_name(ms) <= prev.name:
            ms = parse_index_file_name(prev.name) + 1
            while index_file_name(ms) <= prev.name:  # local-time oddities (DST)
                ms += 1
        self.io.makedirs(self.index_dir)
        path = os.path.join(self.index_dir, index_file_name(ms))
        f = IndexFile(path, self.hash_slot_num, self.index_num, self.io, create=True,
                      end_phy_offset=prev.end_phy_offset if prev else 0,
                      end_timestamp=prev.end_timestamp if prev else 0)
        with self._list_lock:
            self._files.append(f)
        return f

    def _last_for_write(self) -> IndexFile:
        with self._list_lock:
            last = self._files[-1] if self._files else None
        if last is None or last.is_full:
            last = self._new_file(last)
        return last

    def dispatch(self, request: DispatchRequest) -> None:
        self.dispatch_many((request,))

    def dispatch_many(self, requests: Sequence[DispatchRequest]) -> None:
        """Index the keys of `requests` (in commitlog order): topic#UNIQ_KEY and topic#KEY
        for each key, under one lock and with one header write per file."""
        self.put_entries(index_entries(requests))

    def put_entries(self, entries: list[IndexEntry]) -> None:
        """Add (topic#key, phy_offset, store_timestamp) entries in commitlog order, skipping
        those below the index's end (already indexed before a restart)."""
        if not entries:
            return
        with self._write_lock:
            f = self._last_for_write()
            end = f.end_phy_offset
            if entries[0][1] < end:
                # indexed before a restart; re-dispatch after recovery repeats it
                entries = [e for e in entries if e[1] >= end]
            while entries:
                done = f.put_entries(entries)
                if done == len(entries):
                    return
                entries = entries[done:]
                f = self._new_file(f)  # full: the new file begins where this one ended

    def end_phy_offset(self) -> int:
        """The commitlog offset of the newest indexed record (0 without files): re-dispatch
        from there repeats nothing the index lacks."""
        with self._list_lock:
            return self._files[-1].end_phy_offset if self._files else 0

    # -- reading ----------------------------------------------------------------------------
    def query(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int,
              max_phy_offset: int | None = None) -> list[int]:
        """Commitlog offsets indexed under topic#key with store time in [begin_ts, end_ts],
        newest first, distinct, at most max_num. Offsets >= max_phy_offset (past the end of
        the commitlog) are left out. Hash collisions can yield other keys' offsets."""
        found: list[int] = []
        if max_num <= 0:
            return found
        full = build_key(topic, key)
        seen: set[int] = set()
        for f in reversed(self.files()):
            if f.is_time_matched(begin_ts, end_ts):
                got = f.select_phy_offsets(full, max_num - len(found), begin_ts, end_ts,
                                           max_phy_offset=max_phy_offset, skip=seen)
                found += got
                seen.update(got)
            if f.begin_timestamp < begin_ts or len(found) >= max_num:
                break  # older files only hold older entries
        return found

    # -- retention, truncation --------------------------------------------------------------
    def delete_expired(self, min_phy_offset: int) -> int:
        """Delete the oldest files whose endPhyOffset < min_phy_offset, never the last one.
        A file still read by a query is retried on a later call. Returns the count deleted."""
        deleted = 0
        with self._write_lock:
            for f in self.files()[:-1]:
                if f.end_phy_offset >= min_phy_offset:
                    break
                if not f.destroy(DESTROY_INTERVAL_FORCIBLY_MS, self.clock.now_ms()):
                    break
                with self._list_lock:
                    self._files.remove(f)
                deleted += 1
            if deleted:
                self.io.fsync_dir(self.index_dir)
        return deleted

    def truncate_dirty(self, phy_offset: int) -> int:
        """Forget every entry with phyOffset >= phy_offset. Returns the entries removed from
        the straddling file plus the number of files deleted."""
        removed = 0
        with self._write_lock:
            while True:
                with self._list_lock:
                    last = self._files[-1] if self._files else None
                if last is None:
                    break
                if last.begin_phy_offset < phy_offset:
                    removed += last.truncate_from(phy_offset)
                    break
                with self._list_lock:
                    self._files.pop()
                if not last.destroy(0, 0):  # a query holds it: unmap anyway, the file is wrong
                    last.destroy(0, 0)
                self.io.fsync_dir(self.index_dir)
                removed += 1
        return removed

    # -- lifecycle --------------------------------------------------------------------------
    def flush(self, sealed_only: bool = False) -> int:
        """msync the files written since their last flush, oldest first; with `sealed_only`
        the full ones only (the logics flush's rounds), else the one being written too
        (shutdown). Returns the newest full file's endTimestamp, 0 when none is full: the
        checkpoint's indexMsgTimestamp, which may only cover files that an abnormal restart
        keeps (`load` deletes those ending past it, and messageIndexSafe re-dispatches from
        it). The file being written always ends past it, so flushing that file in a round
        would save nothing after a crash; RocketMQ flushes a file when it fills, and the
        kernel writes the hot slot pages back every 30 s instead of every round. Raises
        DiskError."""
        files = self.files()
        sealed = [f for f in files if f.is_full]
        for f in sealed if sealed_only else files:
            if f.dirty:
                f.flush()
        return sealed[-1].end_timestamp if sealed else 0

    def close(self) -> None:
        with self._write_lock:
            for f in self.files():
                f.close()

"""One RocketMQ index file: a disk hash table from `topic#key` to commitlog offsets.

File name: creation time as yyyyMMddHHmmssSSS in local time (RocketMQ
UtilAll.timeMillisToHumanString), so names sort in creation order (store.layout.index_file_name).
All integers big-endian; the structs of the three parts are INDEX_HEADER, HASH_SLOT and
INDEX_ENTRY.

    offset                    size           field
    ------------------------  -------------  ------------------------------------------------
    0                         8              beginTimestamp   i64 ms, store time of entry 1
    8                         8              endTimestamp     i64 ms, store time of the newest
    16                        8              beginPhyOffset   i64, commitlog offset of entry 1
    24                        8              endPhyOffset     i64, commitlog offset of newest
    32                        4              hashSlotCount    i32, slots in use
    36                        4              indexCount       i32, next entry number (from 1)
    40                        4 * slots      hash slots       i32 each: newest entry number of
                                                              the slot, 0 = empty
    40 + 4*slots              20 * entries   entries          see below; entry 0 is unused

    entry (20 bytes): keyHash i32 @0, phyOffset i64 @4, timeDiff i32 @12 (seconds since
    beginTimestamp), prevIndex i32 @16 (previous entry of the same slot, 0 = end of chain)

keyHash = abs(String.hashCode(key)), with Integer.MIN_VALUE (whose abs stays negative in Java)
mapped to 0; slot = keyHash % slots. Only hashes are stored, so a lookup can return offsets of
other keys with the same hash: callers check the records' keys.

Writes come from one thread; an entry is written before the slot that points at it and the
header last, so a concurrent reader following a slot always finds a complete entry. Unlike
RocketMQ, which writes the header only at flush, the header is updated on every put.

Unlike RocketMQ, a file does not take its full size (about 420 MB with the defaults) on disk
when it is created: it is allocated up to its header, its slots and `GROW_STEP_ENTRIES`
entries, and grows by that step when the entries reach the end (the layout above is unchanged:
a grown file is a prefix of the full one). Growth keeps preallocation's crash safety: the new
range is reserved with posix_fallocate (never a sparse truncate) before the new mapping
covers it, so no write ever touches a page without disk behind it (SIGBUS); ENOSPC there is a
CreateFileError, which reput reports as DISPATCH_ERROR (writes refused until it succeeds).
"""
from __future__ import annotations

import os
import struct

from store.codec import java_string_hash
from store.errors import CorruptFile, CreateFileError, DiskError
from store.commitlog.fileio import DEFAULT_FILE_IO, FileIO
from store.commitlog.mapped_file import MappedFile

INDEX_HEADER = struct.Struct(">qqqqii")  # header, offsets 0..40 of the table above
INDEX_ENTRY = struct.Struct(">iqii")  # keyHash, phyOffset, timeDiff, prevIndex
HASH_SLOT = struct.Struct(">i")  # newest entry number of the slot, 0 = empty
INDEX_HEADER_SIZE = INDEX_HEADER.size  # 40
HASH_SLOT_SIZE = HASH_SLOT.size  # 4
INDEX_ENTRY_SIZE = INDEX_ENTRY.size  # 20
INVALID_INDEX = 0
_I32_MAX = 0x7FFFFFFF
GROW_STEP_ENTRIES = 200_000  # 4 MB of entries per growth step


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


def initial_index_file_size(hash_slot_num: int, index_num: int) -> int:
    """What a new file takes on disk: header, slots and the first growth step of entries."""
    return index_file_size(hash_slot_num, min(index_num, GROW_STEP_ENTRIES))


def is_grown_size(size: int, hash_slot_num: int, index_num: int) -> bool:
    """Whether `size` is one a file of this geometry can have: the initial size up to the
    full one (a crash during a growth can leave any size in between)."""
    return (initial_index_file_size(hash_slot_num, index_num) <= size
            <= index_file_size(hash_slot_num, index_num))


def index_key_hash(key: str) -> int:
    """RocketMQ IndexFile.indexKeyHashMethod."""
    h = abs(java_string_hash(key))
    return 0 if h > _I32_MAX else h  # Math.abs(Integer.MIN_VALUE) is still negative


class IndexFile:
    """One index file (the layout of the module docstring): owns its mapping (through a
    MappedFile, which gives hold()/release()/destroy()), the header fields kept in memory
    (begin/end timestamp and phyOffset, hashSlotCount, indexCount), its growth and `dirty`.

    No lock of its own. One writer at a time (IndexService's `_write_lock`: put, grow,
    truncate); queries read concurrently without a lock, under hold()/release(), relying on
    the write order (entry, then slot, then header) and on reading indexCount first."""

    def __init__(self, path: str, hash_slot_num: int, index_num: int,
                 io: FileIO = DEFAULT_FILE_IO, create: bool = False, end_phy_offset: int = 0,
                 end_timestamp: int = 0) -> None:
        if hash_slot_num <= 0 or index_num < 2:
            raise ValueError("an index file needs at least one slot and two entries")
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.io = io
        self.full_size = index_file_size(hash_slot_num, index_num)
        self._entries_at = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        if create:
            size = initial_index_file_size(hash_slot_num, index_num)
        else:
            try:
                size = os.path.getsize(path)
            except OSError as e:
                raise CorruptFile(f"cannot read the size of {path}: {e}") from e
            if not is_grown_size(size, hash_slot_num, index_num):
                raise CorruptFile(f"{path} has {size} bytes, expected "
                                  f"{initial_index_file_size(hash_slot_num, index_num)}.."
                                  f"{self.full_size}")
        self.file_size = size  # allocated and mapped now
        self.capacity = min(index_num, (size - self._entries_at) // INDEX_ENTRY_SIZE)
        self.dirty = create  # written since the last flush()
        # MappedFile gives us preallocation, the mapping and hold()/release()/destroy().
        self._mf = MappedFile(path, size, io, create=create)
        self._mm = self._mf.mm
        if create:
            # A new file continues the previous one: begin = end = where that one stopped,
            # so the service's "already indexed" check works before the first put.
            self.begin_timestamp = self.end_timestamp = end_timestamp
            self.begin_phy_offset = self.end_phy_offset = end_phy_offset
            self.hash_slot_count = 0
            self.index_count = 1
            self._write_header()
        else:
            (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
             self.end_phy_offset, self.hash_slot_count, self.index_count) = \
                INDEX_HEADER.unpack_from(self._mm, 0)
            # RocketMQ IndexHeader.load: a header never flushed reads as zeros.
            self.index_count = min(max(self.index_count, 1), self.capacity)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def is_time_matched(self, begin: int, end: int) -> bool:
        """Does [begin, end] overlap [beginTimestamp, endTimestamp]?"""
        return begin <= self.end_timestamp and end >= self.begin_timestamp

    # -- raw access -------------------------------------------------------------------------
    def _write_header(self) -> None:
        INDEX_HEADER.pack_into(self._mm, 0, self.begin_timestamp, self.end_timestamp,
                          self.begin_phy_offset, self.end_phy_offset, self.hash_slot_count,
                          self.index_count)

    def _slot_pos(self, key_hash: int) -> int:
        return INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE

    def _entry_pos(self, n: int) -> int:
        return self._entries_at + n * INDEX_ENTRY_SIZE

    def entry(self, n: int) -> tuple[int, int, int, int]:
        """(keyHash, phyOffset, timeDiff, prevIndex) of entry n."""
        return INDEX_ENTRY.unpack_from(self._mm, self._entry_pos(n))

    # -- writing ----------------------------------------------------------------------------
    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add `key` -> phy_offset; False when the file is full."""
        return self.put_entries([(key, phy_offset, store_timestamp)]) == 1

    def put_entries(self, entries: list[tuple[str, int, int]]) -> int:
        """Add (key, phy_offset, store_timestamp) entries, in order (records in commitlog
        order); returns how many were added (fewer than len(entries) when the file fills up).

        This is reput's path (two keys per message: topic#UNIQ_KEY and topic#KEY, a step's
        records at once), so the loop keeps everything in locals and writes the header once,
        after the entries and slots of all keys (a reader follows index_count, which still
        moves per key). The bytes written are the same as from one put_key per key."""
        mm = self._mm
        slots = self.hash_slot_num
        index_num = self.index_num
        entries_at = self._entries_at
        slot_unpack, slot_pack = HASH_SLOT.unpack_from, HASH_SLOT.pack_into
        entry_pack = INDEX_ENTRY.pack_into
        n = self.index_count
        done = 0
        last_phy = last_ts = 0
        for key, phy_offset, store_timestamp in entries:
            if n >= index_num:
                break
            if n >= self.capacity:
                try:
                    self._grow()
                except BaseException:
                    if done:  # what this call added stays consistent
                        self.end_phy_offset, self.end_timestamp = last_phy, last_ts
                        self._write_header()
                        self.dirty = True
                    raise
                mm = self._mm
            h = java_string_hash(key)
            key_hash = -h if h < 0 else h
            if key_hash > _I32_MAX:  # Math.abs(Integer.MIN_VALUE) stays negative: RocketMQ 0
                key_hash = 0
            slot_pos = INDEX_HEADER_SIZE + (key_hash % slots) * HASH_SLOT_SIZE
            slot_value = slot_unpack(mm, slot_pos)[0]
            if slot_value <= INVALID_INDEX or slot_value >= n:
                # Empty, or stale: a slot at or past indexCount (header cut back by
                # truncate_from, or never flushed by RocketMQ); RocketMQ allows == and may
                # then link an entry to itself.
                slot_value = INVALID_INDEX
                self.hash_slot_count += 1
            if n <= 1:
                # RocketMQ computes entry 1's timeDiff before moving beginTimestamp to it,
                # which in a rolled file measures from the previous file's end. We move begin
                # first, so entry 1 always has timeDiff 0 and reads back at its own time.
                self.begin_phy_offset = phy_offset
                self.begin_timestamp = store_timestamp
            begin_ts = self.begin_timestamp
            diff = (store_timestamp - begin_ts) // 1000 if begin_ts > 0 else 0
            diff = 0 if diff < 0 else (_I32_MAX if diff > _I32_MAX else diff)
            entry_pack(mm, entries_at + n * INDEX_ENTRY_SIZE, key_hash, phy_offset, diff,
                       slot_value)
            slot_pack(mm, slot_pos, n)
            n += 1
            self.index_count = n
            done += 1
            last_phy, last_ts = phy_offset, store_timestamp
        if done:
            self.end_phy_offset = last_phy
            self.end_timestamp = last_ts
            self._write_header()
            self.dirty = True
        return done

    def _grow(self) -> None:
        """Reserve and map the next step of entries (see the module docstring). The old
        mapping is synced first, then left to readers still using it (same file, same pages)
        and freed with its last reference. Raises CreateFileError (ENOSPC) or DiskError."""
        new_size = min(self.full_size, self.file_size + GROW_STEP_ENTRIES * INDEX_ENTRY_SIZE)
        mf = self._mf
        try:
            self.io.preallocate_range(mf.fd, self.file_size, new_size - self.file_size,
                                      self.path)
        except OSError as e:
            raise CreateFileError(self.path, e) from e
        self._msync()
        try:
            mm = self.io.map(mf.fd, new_size, self.path)
        except OSError as e:
            raise CreateFileError(self.path, e) from e
        mf.remap(mm, new_size)
        self._mm = mm
        self.file_size = new_size
        self.capacity = min(self.index_num, (new_size - self._entries_at) // INDEX_ENTRY_SIZE)

    def truncate_from(self, phy_offset: int) -> int:
        """Undo the entries with phyOffset >= phy_offset (a suffix: entries are added in
        commitlog order) and return how many. The header goes to disk first: should a crash
        follow, slots still pointing at >= indexCount are ignored as stale by get and put.
        Then each removed entry's slot is set back to the entry's predecessor, newest first,
        which restores every slot exactly as it was before the entry was added."""
        count = self.index_count
        k = count
        while k > 1 and self.entry(k - 1)[1] >= phy_offset:
            k -= 1
        if k == count:
            return 0
        removed = [self.entry(n) for n in range(count - 1, k - 1, -1)]
        if k > 1:
            _, phy, diff, _ = self.entry(k - 1)
            self.end_phy_offset, self.end_timestamp = phy, self.begin_timestamp + diff * 1000
        else:
            self.begin_phy_offset = self.end_phy_offset = 0
            self.begin_timestamp = self.end_timestamp = 0
        self.index_count = k
        slots: dict[int, int] = {}
        for key_hash, _, _, prev in removed:
            pos = self._slot_pos(key_hash)
            slots[pos] = prev if 0 < prev < k else INVALID_INDEX
        self.hash_slot_count -= sum(1 for v in slots.values() if v == INVALID_INDEX)
        self._write_header()
        self._msync()
        for pos, value in slots.items():
            HASH_SLOT.pack_into(self._mm, pos, value)
        start = self._entry_pos(k)
        self._mm[start:self._entry_pos(count)] = bytes(self._entry_pos(count) - start)
        self._msync()
        return count - k

    # -- reading ----------------------------------------------------------------------------
    def select_phy_offsets(self, key: str, max_num: int, begin_ts: int, end_ts: int, *,
                           max_phy_offset: int | None = None,
                           skip: set[int] | None = None) -> list[int]:
        """Offsets stored for `key` with store time in [begin_ts, end_ts], newest first, at
        most max_num, distinct, below max_phy_offset and not in `skip` when given."""
        found: list[int] = []
        if max_num <= 0 or not self._mf.hold():
            return found
        try:
            key_hash = index_key_hash(key)
            # indexCount is read before the slot: a slot at >= count points at an entry whose
            # header update is still under way, or at a stale leftover; either way skip it.
            count = self.index_count
            n = HASH_SLOT.unpack_from(self._mm, self._slot_pos(key_hash))[0]
            if n <= INVALID_INDEX or n >= count:
                return found
            while len(found) < max_num:
                h, phy, diff, prev = self.entry(n)
                if diff < 0:
                    break
                t = self.begin_timestamp + diff * 1000
                if (h == key_hash and begin_ts <= t <= end_ts
                        and (max_phy_offset is None or phy < max_phy_offset)
                        and (skip is None or phy not in skip) and phy not in found):
                    found.append(phy)
                # A chain only points at older entries; prev >= n means a damaged file.
                if prev <= INVALID_INDEX or prev >= n or t < begin_ts:
                    break
                n = prev
        except ValueError:  # unmapped forcibly while we read: return what we have
            pass
        finally:
            self._mf.release()
        return found

    # -- lifecycle --------------------------------------------------------------------------
    def _msync(self) -> None:
        try:
            mm = self._mm  # one mapping and its own length: a growth may swap it meanwhile
            self.io.msync(mm, 0, len(mm), self.path)
        except OSError as e:
            raise DiskError("msync", self.path, e) from e

    def flush(self) -> None:
        """msync the whole mapping (only dirty pages are written). Raises DiskError."""
        if not self._mf.hold():
            return
        try:
            self.dirty = False  # cleared first: a put racing with the msync marks it again
            try:
                self._msync()
            except DiskError:
                self.dirty = True
                raise
        finally:
            self._mf.release()

    def close(self) -> None:
        self._mf.close()

    def destroy(self, interval_forcibly_ms: int = 0, now_ms: int = 0) -> bool:
        """Unmap and delete; False while readers still hold it (call again later)."""
        return self._mf.destroy(interval_forcibly_ms, now_ms)

    def __repr__(self) -> str:
        return (f"IndexFile({self.name}, count={self.index_count}, "
                f"phy=[{self.begin_phy_offset},{self.end_phy_offset}], "
                f"ts=[{self.begin_timestamp},{self.end_timestamp}])")


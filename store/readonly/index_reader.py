"""One index file, read-only (layout: store.index.index_file), and the inference of its geometry,
which the file does not store."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

from store.index.index_file import (
    HASH_SLOT,
    HASH_SLOT_SIZE,
    INDEX_ENTRY,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER,
    INDEX_HEADER_SIZE,
    index_key_hash,
    is_grown_size,
)
from .files import ROFile


@dataclass
class IndexHeader:
    """The 40-byte header (store.index.index_file.INDEX_HEADER), field for field."""

    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


class IndexReader:
    """One index file, read-only. The geometry (hash slots, max entries) is not stored in the
    file; it is inferred from the size and checked against the header (see infer_index_geometry)."""

    def __init__(self, path: str) -> None:
        self.file = ROFile(path, 0)
        self.name = self.file.name
        self.path = path
        self.size = self.file.size
        self.header: IndexHeader | None = None
        self.slots: int | None = None
        self.max_entries: int | None = None
        if self.size >= INDEX_HEADER_SIZE:
            self.header = IndexHeader(*INDEX_HEADER.unpack_from(self.file.view, 0))
            geo = infer_index_geometry(self.size, self.header, self.file.view)
            if geo is not None:
                self.slots, self.max_entries = geo

    @property
    def index_count(self) -> int:
        if self.header is None:
            return 1
        count = max(self.header.index_count, 1)
        return min(count, self.max_entries) if self.max_entries else count

    @property
    def entries(self) -> int:
        return self.index_count - 1

    def close(self) -> None:
        self.file.close()

    def lookup(self, full_key: str) -> Iterator[int]:
        """Physical offsets whose entry hash equals the key's (newest first)."""
        if self.slots is None or self.header is None:
            return
        view = self.file.view
        key_hash = index_key_hash(full_key)
        count = self.index_count
        entries_at = INDEX_HEADER_SIZE + self.slots * HASH_SLOT_SIZE
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.slots) * HASH_SLOT_SIZE
        n = HASH_SLOT.unpack_from(view, slot_pos)[0]
        steps = 0
        while 0 < n < count and steps < count:
            h, phy, _diff, prev = INDEX_ENTRY.unpack_from(view, entries_at + n * INDEX_ENTRY_SIZE)
            if h == key_hash:
                yield phy
            if prev <= 0 or prev >= n:
                return
            n = prev
            steps += 1


def _index_entries_match(view: memoryview, slots: int, num: int, header: IndexHeader) -> bool:
    count = header.index_count
    if count <= 1:
        return True
    if count > num:
        return False
    entries_at = INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE
    try:
        first = INDEX_ENTRY.unpack_from(view, entries_at + INDEX_ENTRY_SIZE)
        last = INDEX_ENTRY.unpack_from(view, entries_at + (count - 1) * INDEX_ENTRY_SIZE)
    except struct.error:
        return False
    return (first[1] == header.begin_phy_offset and last[1] == header.end_phy_offset
            and first[0] >= 0 and last[0] >= 0 and first[2] >= 0 and last[2] >= 0
            and 0 <= last[3] < count - 1)


def infer_index_geometry(size: int, header: IndexHeader, view: memoryview,
                         hint: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """(maxHashSlotNum, maxIndexNum) of an index file of `size` bytes: the hint if it fits,
    else RocketMQ's ratio maxIndexNum = 4 * maxHashSlotNum, else a search for the geometry
    whose first and last entries agree with the header's begin/end physical offsets."""
    body = size - INDEX_HEADER_SIZE
    if body <= 0:
        return None
    candidates = []
    if hint is not None and is_grown_size(size, *hint):  # a grown file is a prefix
        candidates.append(hint)
    if body % 84 == 0:  # 84 = one slot (4) + RocketMQ's four entries (4 * 20) per slot
        candidates.append((body // 84, 4 * (body // 84)))
    for slots, num in candidates:
        if slots > 0 and num >= 2 and _index_entries_match(view, slots, num, header):
            return slots, num
    if header.index_count <= 1:
        return candidates[0] if candidates else None
    if body % 4:
        return None
    # 4 * slots + 20 * num == body  =>  slots = body/4 - 5 * num
    quarter = body // 4
    num = header.index_count
    tries = 0
    while True:
        slots = quarter - 5 * num
        if slots < max(1, header.hash_slot_count) or tries > 5_000_000:
            return None
        if _index_entries_match(view, slots, num, header):
            return slots, num
        num += 1
        tries += 1


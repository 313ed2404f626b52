"""The files of one consume queue, read-only (unit layout: store.queue.consume_queue)."""
from __future__ import annotations

from typing import Iterator

from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, CQ_UNIT, FILLER_SIZE
from ..layout import is_offset_file_name
from .files import ROFile, file_holding, numbered_files


class QueueFiles:
    """The files of one consume queue, read-only."""

    def __init__(self, topic: str, queue_id: int, directory: str) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory
        self.files = [ROFile(p, b) for p, b in numbered_files(directory, is_offset_file_name)]
        self.files = [f for f in self.files if f.size > 0]
        self.file_size = self.files[0].size if self.files else 0

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.queue_id}"

    def close(self) -> None:
        for f in self.files:
            f.close()

    def file_for(self, pos: int) -> ROFile | None:
        return file_holding(self.files, self.file_size, pos)

    def unit(self, index: int) -> tuple[int, int, int] | None:
        """The raw unit at a queue index, None when no file holds it."""
        pos = index * CQ_STORE_UNIT_SIZE
        f = self.file_for(pos)
        if f is None or pos - f.base + CQ_STORE_UNIT_SIZE > f.size:
            return None
        return CQ_UNIT.unpack_from(f.view, pos - f.base)

    def written_end(self, f: ROFile) -> int:
        """Bytes of `f` up to its last non-zero unit (a multiple of 20)."""
        end = f.last_nonzero(0, f.size - f.size % CQ_STORE_UNIT_SIZE)
        return -(-end // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE

    def max_offset(self) -> int:
        """One past the last written unit (RocketMQ maxOffsetInQueue)."""
        for f in reversed(self.files):
            end = self.written_end(f)
            if end:
                return (f.base + end) // CQ_STORE_UNIT_SIZE
        return self.files[0].base // CQ_STORE_UNIT_SIZE if self.files else 0

    def iter_units(self, f: ROFile) -> Iterator[tuple[int, tuple[int, int, int]]]:
        """(index, unit) of every unit slot of `f` up to its last non-zero unit."""
        end = self.written_end(f)
        base_index = f.base // CQ_STORE_UNIT_SIZE
        view = f.view
        for i, unit in enumerate(CQ_UNIT.iter_unpack(view[:end])):
            yield base_index + i, unit

    def last_real(self) -> tuple[int, tuple[int, int, int]] | None:
        """The last unit that is neither a filler nor unwritten."""
        for f in reversed(self.files):
            end = self.written_end(f)
            view = f.view
            for pos in range(end - CQ_STORE_UNIT_SIZE, -1, -CQ_STORE_UNIT_SIZE):
                unit = CQ_UNIT.unpack_from(view, pos)
                if unit[0] >= 0 and unit[1] > 0 and unit[1] != FILLER_SIZE:
                    return (f.base + pos) // CQ_STORE_UNIT_SIZE, unit
        return None

    def min_offset(self, min_phy: int) -> int:
        """First unit that is real and still in the commitlog (RocketMQ minOffsetInQueue)."""
        for f in self.files:
            for index, unit in self.iter_units(f):
                if unit[0] >= min_phy and unit[1] > 0 and unit[1] != FILLER_SIZE:
                    return index
        return self.max_offset()


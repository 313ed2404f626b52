"""One store file mapped read-only, the listing of a directory's numbered store files, and
which of them holds a position."""
from __future__ import annotations

import mmap
import os
from typing import BinaryIO, Callable, Sequence


class ROFile:
    """One store file, mapped read-only on first use (never written, never locked)."""

    def __init__(self, path: str, base: int) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.base = base
        self.size = os.path.getsize(path)
        self._fh: BinaryIO | None = None
        self._mm: mmap.mmap | None = None
        self._view: memoryview | None = None

    @property
    def end(self) -> int:
        return self.base + self.size

    @property
    def view(self) -> memoryview:
        if self._view is None:
            if self.size == 0:
                self._view = memoryview(b"")
            else:
                self._fh = open(self.path, "rb")
                self._mm = mmap.mmap(self._fh.fileno(), self.size, access=mmap.ACCESS_READ)
                self._view = memoryview(self._mm)
        return self._view

    def close(self) -> None:
        view, mm, fh = self._view, self._mm, self._fh
        self._view = self._mm = self._fh = None
        try:
            if view is not None:
                view.release()
            if mm is not None:
                mm.close()
        except BufferError:  # a slice still alive somewhere: the GC unmaps it later
            pass
        if fh is not None:
            fh.close()

    def last_nonzero(self, start: int = 0, end: int | None = None) -> int:
        """1 + position of the last non-zero byte in [start, end), or start if all zero."""
        end = self.size if end is None else min(end, self.size)
        view = self.view
        chunk = 1 << 20
        pos = end
        while pos > start:
            lo = max(start, pos - chunk)
            data = view[lo:pos].tobytes().rstrip(b"\0")
            if data:
                return lo + len(data)
            pos = lo
        return start

    def nonzero_stats(self, start: int) -> tuple[int, int | None]:
        """(count of non-zero bytes in [start, size), position of the first one or None)."""
        view = self.view
        count = 0
        first = None
        pos = start
        chunk = 1 << 20
        while pos < self.size:
            data = view[pos:min(self.size, pos + chunk)].tobytes()
            zeros = data.count(0)
            if zeros != len(data):
                count += len(data) - zeros
                if first is None:
                    first = pos + len(data) - len(data.lstrip(b"\0"))
            pos += len(data)
        return count, first


def numbered_files(directory: str, is_name: Callable[[str], bool]) -> list[tuple[str, int]]:
    """(path, number) of the regular files of `directory` whose name passes `is_name`
    (store.layout.is_offset_file_name or is_index_file_name), in number order; [] when the
    directory is missing."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for n in names:
        path = os.path.join(directory, n)
        if is_name(n) and os.path.isfile(path):
            out.append((path, int(n)))
    return sorted(out, key=lambda x: x[1])



def file_holding(files: Sequence[ROFile], file_size: int, pos: int) -> ROFile | None:
    """The file of `files` (in base order, normally `file_size` bytes each) that holds byte
    `pos`, or None."""
    if not files or pos < files[0].base:
        return None
    if file_size:
        i = (pos - files[0].base) // file_size
        if 0 <= i < len(files) and files[i].base <= pos < files[i].end:
            return files[i]
    for f in files:  # irregular layout (gaps, odd sizes)
        if f.base <= pos < f.end:
            return f
    return None

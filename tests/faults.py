"""Fault injection for store files: a FileIO whose chosen operations fail with an errno."""
from __future__ import annotations

import errno
import os
import threading

from store.commitlog.fileio import FileIO


class FaultyFileIO(FileIO):
    """fail("fdatasync", errno.EIO) makes every later fdatasync raise; `path_contains` narrows
    it to matching paths, `times` to the next N calls. heal() removes every rule."""

    def __init__(self) -> None:
        self._rules: list[dict] = []
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}

    def fail(self, op: str, err: int = errno.EIO, *, path_contains: str = "",
             times: int | None = None) -> None:
        with self._lock:
            self._rules.append({"op": op, "errno": err, "path": path_contains, "times": times})

    def heal(self, op: str | None = None) -> None:
        with self._lock:
            self._rules = [r for r in self._rules if op is not None and r["op"] != op]

    def _check(self, op: str, path: str) -> None:
        with self._lock:
            self.calls[op] = self.calls.get(op, 0) + 1
            for r in self._rules:
                if r["op"] == op and r["path"] in path and (r["times"] is None or r["times"] > 0):
                    if r["times"] is not None:
                        r["times"] -= 1
                    raise OSError(r["errno"], os.strerror(r["errno"]), path)


EIO = errno.EIO
ENOSPC = errno.ENOSPC
EROFS = errno.EROFS

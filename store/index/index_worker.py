"""The child's end of the index process: an IndexService that answers requests from a pipe
(index_wire.py), so the index's hashing and file writes run on a core of their own.

`IndexWorker.handle` is the whole protocol, one request in, one reply out, with no I/O of its
own; `serve` reads frames from one stream and writes the replies to another; `main` is the
process (`python -m store.index.index_worker DIR SLOTS ENTRIES`), started by index_process.py.

The worker never reads the clock: the parent sends its time with each request that names a
file or deletes one, so files are named by the store's clock as in one process. It exits when
asked (`close`) or when its input ends, which is also what happens when the parent dies:
then it closes its files without msync (the parent's next start recovers from the
checkpoint, as after any crash).
"""
from __future__ import annotations

import logging
import sys
from typing import BinaryIO

from common.clock import Clock
from .index_service import IndexService
from .index_wire import error_reply, read_frame, write_frame
from common.pipe_frames import child_main
from store.errors import StoreError

log = logging.getLogger(__name__)


class RequestClock(Clock):
    """The time the current request brought (the parent's clock)."""

    def __init__(self) -> None:
        self.ms = 0

    def now_ms(self) -> int:
        return self.ms


class IndexWorker:
    """Owns one IndexService and answers the requests of index_wire.py. Not thread-safe: one
    request at a time, as the pipe delivers them."""

    def __init__(self, index_dir: str, hash_slot_num: int, index_num: int) -> None:
        self.clock = RequestClock()
        self.service = IndexService(index_dir, hash_slot_num, index_num, clock=self.clock)
        self.closed = False

    def handle(self, request: tuple) -> tuple:
        """The reply to one request: ("ok", value) or ("error", ...)."""
        try:
            return ("ok", self._do(request[0], request[1:]))
        except (StoreError, OSError, ValueError, TypeError) as e:
            return error_reply(e)

    def _do(self, op: str, args: tuple):
        svc = self.service
        if op == "put":
            entries, self.clock.ms = args
            svc.put_entries(entries)
            return None
        if op == "end":
            return svc.end_phy_offset()
        if op == "query":
            return svc.query(*args)
        if op == "flush":
            return svc.flush(*args)
        if op == "delete_expired":
            min_phy_offset, self.clock.ms = args
            return svc.delete_expired(min_phy_offset)
        if op == "truncate":
            return svc.truncate_dirty(*args)
        if op == "load":
            return svc.load(*args)
        if op == "files":
            return [(f.path, f.hash_slot_num, f.index_num) for f in svc.files()]
        if op == "close":
            svc.close()
            self.closed = True
            return None
        raise ValueError(f"unknown index request {op!r}")


def serve(worker: IndexWorker, src: BinaryIO, out: BinaryIO) -> None:
    """Answer requests until `close` or the end of `src`."""
    while not worker.closed:
        request = read_frame(src)
        if request is None:  # the parent is gone: nothing more will come
            worker.service.close()
            return
        write_frame(out, worker.handle(request))


def main(argv: list[str] | None = None) -> int:
    def run(args: list[str], out: BinaryIO) -> None:
        serve(IndexWorker(args[0], int(args[1]), int(args[2])), sys.stdin.buffer, out)
    return child_main("index-worker",
                      "python -m store.index.index_worker INDEX_DIR HASH_SLOT_NUM INDEX_NUM",
                      argv, 3, run)


if __name__ == "__main__":
    sys.exit(main())

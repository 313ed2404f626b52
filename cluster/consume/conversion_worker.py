"""The child's end of the conversion process: reads commitlog records by offset from its own
read-only mappings of the store's files and answers their delivered v2 form as
`delivery_bytes.MessageParts`, so the serving process does not decode or convert them under
its GIL (conversion_process.py is the parent's end and lists the requests).

`ConversionWorker.handle` is the protocol without I/O; `serve` reads frames from one stream,
writes the replies to another and, between requests, converts the records the parent expects
to be asked for next (`prefetch`) into a cache. `main` is the process
(`python -m cluster.consume.conversion_worker COMMITLOG_DIR`).

The files are the interface, as between RocketMQ's writer and its reput: a record the parent
asks for was dispatched, so its bytes are complete in the page cache the mapping shares. A
record that is not there or not whole (a file deleted by retention, a torn or corrupt record)
is answered None and the parent reads it itself. A cached record is served only while the
bytes at its offset still start with the header it was converted from. A commitlog cut
(truncated, or deleted whole) may later hold another file under a name it mapped, as a
former master that became a slave and a master again does: each request carries the parent's
count of such cuts (`CommitLog.truncations`), and when it changed the worker lets go of every
mapping and everything it cached.

It never writes a byte and takes no lock. It exits when its input ends: the parent closed the
pipe or died.
"""
from __future__ import annotations

import logging
import os
import select
import sys
from collections import OrderedDict, deque
from typing import BinaryIO

from store import codec
from store.codec import MessageRecord
from store.layout import is_offset_file_name
from common.pipe_frames import PIPE_READ, FrameDecoder, PipeError, child_main, write_frame
from store.readonly.files import ROFile, numbered_files

from cluster.consume.delivery_bytes import MessageParts, message_parts

log = logging.getLogger(__name__)

CACHE_ENTRIES = 4096  # converted records kept for the next requests (about 1.2 KiB each at 1 KiB)
HEADER_CHECKED = 64  # a record's first bytes, through its store timestamp: its identity


class ConversionWorker:
    """Owns the read-only mappings of one commitlog directory and the cache of converted
    records (offset -> (size, header, parts), oldest first). One request at a time; no
    locks (one thread)."""

    def __init__(self, commitlog_dir: str, cache_entries: int = CACHE_ENTRIES) -> None:
        self.directory = commitlog_dir
        self.files: dict[int, ROFile] = {}  # base -> file
        self.truncations = 0  # the parent's count the mappings were made under
        self.file_size = 0
        self.cache: OrderedDict[int, tuple[int, bytes, MessageParts]] = OrderedDict()
        self.cache_entries = cache_entries
        self.hits = self.converted = self.prefetched = 0

    # -- requests ---------------------------------------------------------------------------
    def handle(self, request: tuple) -> tuple:
        """The reply to ("parts", id, items, prefetch, min_offset, truncations): ("parts", id,
        answers), an answer per item, (head, sp, body_field) or None. `prefetch` is taken by
        `serve`."""
        op = request[0]
        if op == "stats":
            return ("stats", request[1], [self.hits, self.converted, self.prefetched])
        if op != "parts":
            raise ValueError(f"unknown conversion request {op!r}")
        _, request_id, items, _prefetch, min_offset, truncations = request
        if truncations != self.truncations:
            self.close()
            self.truncations = truncations
        self._forget_before(min_offset)
        answers = [self.parts_at(phy, size) for phy, size in items]
        # plain tuples: marshal does not take a NamedTuple
        return ("parts", request_id, [None if p is None else tuple(p) for p in answers])

    def parts_at(self, phy: int, size: int) -> MessageParts | None:
        """The parts of the record at `phy` of `size` bytes, None when it is not there whole."""
        located = self._locate(phy)
        if located is None:
            return None
        view, pos = located
        header = bytes(view[pos:pos + HEADER_CHECKED])
        cached = self.cache.get(phy)
        if cached is not None and cached[0] == size and cached[1] == header:
            self.cache.move_to_end(phy)
            self.hits += 1
            return cached[2]
        record = codec.decode(view, pos, min(len(view), pos + size))
        if not isinstance(record, MessageRecord) or record.total_size != size:
            return None
        parts = message_parts(record)
        self.converted += 1
        self.cache[phy] = (size, header, parts)
        if len(self.cache) > self.cache_entries:
            self.cache.popitem(last=False)
        return parts

    def prefetch(self, phy: int, size: int) -> None:
        """Convert the record at `phy` into the cache, if it is there."""
        if phy not in self.cache:
            self.prefetched += 1
            self.parts_at(phy, size)

    # -- files ------------------------------------------------------------------------------
    def _locate(self, phy: int) -> tuple[memoryview, int] | None:
        if not self.file_size:
            self._scan()
            if not self.file_size:
                return None
        base = phy - phy % self.file_size
        entry = self.files.get(base)
        if entry is None:
            self._scan()
            entry = self.files.get(base)
            if entry is None:
                return None
        return entry.view, phy - base

    def _scan(self) -> None:
        """Map the files that appeared (a new file is only added, never changed in place)."""
        for path, base in numbered_files(self.directory, is_offset_file_name):
            if base in self.files:
                continue
            try:
                f = ROFile(path, base)
            except OSError:
                continue
            if not self.file_size:
                self.file_size = f.size
            if f.size == self.file_size:  # a file being created may not have its size yet
                self.files[base] = f

    def _forget_before(self, min_offset: int) -> None:
        for base in [b for b in self.files if b + self.file_size <= min_offset]:
            self._drop(base)

    def _drop(self, base: int) -> None:
        self.files.pop(base).close()

    def close(self) -> None:
        for base in list(self.files):
            self._drop(base)
        self.cache.clear()


class RequestReader:
    """The requests arriving on a pipe's fd, read as they come (os.read, no buffering of its
    own beyond the frame not yet complete), so `waiting` knows whether one is there."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.decoder = FrameDecoder()
        self.ready: deque[tuple] = deque()

    def waiting(self) -> bool:
        """A request is there to be read (a select: ask between pieces of work, not often)."""
        return bool(self.ready) or bool(select.select([self.fd], [], [], 0)[0])

    def next(self) -> tuple | None:
        """The next request, waiting for it; None once the pipe is closed."""
        while not self.ready:
            data = os.read(self.fd, PIPE_READ)
            if not data:
                if self.decoder.inside_frame:
                    raise PipeError("pipe closed inside a frame")
                return None
            self.ready.extend(self.decoder.feed(data))
        return self.ready.popleft()


def serve(worker: ConversionWorker, requests: RequestReader, out: BinaryIO) -> None:
    """Answer requests until the pipe closes; between them, convert what the requests said
    comes next (their `prefetch`), as long as no request waits."""
    write_frame(out, ("ready",))
    pending: list[tuple[int, int]] = []  # popped from the end: the newest request's first
    while True:
        while pending and not requests.waiting():
            for _ in range(min(4, len(pending))):  # a select per few records, not each
                worker.prefetch(*pending.pop())
        request = requests.next()
        if request is None:  # the parent is gone: nothing more will come
            worker.close()
            return
        try:
            reply = worker.handle(request)
        except Exception:  # answered as "convert these yourself"; the worker goes on
            log.exception("conversion request failed")
            reply = ("parts", request[1] if len(request) > 1 else None, None)
        write_frame(out, reply)
        if len(request) == 6 and request[3]:
            pending = (pending + list(reversed(request[3])))[-worker.cache_entries:]


def main(argv: list[str] | None = None) -> int:
    def run(args: list[str], out: BinaryIO) -> None:
        # SCHED_BATCH: woken by a request, the child does not preempt the node that wrote it
        # (it would, being mostly idle): the node goes on answering while the child converts
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except (AttributeError, OSError) as e:
            log.warning("cannot use SCHED_BATCH: %s", e)
        serve(ConversionWorker(args[0]), RequestReader(0), out)
    return child_main("conversion-worker",
                      "python -m cluster.consume.conversion_worker COMMITLOG_DIR", argv, 1, run)


if __name__ == "__main__":
    sys.exit(main())

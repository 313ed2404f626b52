"""Export of a running node's store directory (the server side of Admin.ExportStore).

`StoreExport(store, include, chunk_bytes).messages()` yields the stream of admin_pb2.ExportChunk
messages: one manifest (every file: store-relative path, bytes to send, kind, length on the
node), then the files' chunks in manifest order, then `done`. No gRPC here: the servicer in
cluster/admin/admin_servicer.py only adapts errors and logs.

What the copy is consistent with (all positions are taken once, at the start, in this order):

1. `checkpoint`, `epochFileCheckpoint` and `config/*.json` are small and replaced atomically by
   the store (write tmp + rename): each is read whole, once, first. Never `config/admin.token`,
   nor `lock` or `abort` (the copy opens as a cleanly shut down store).
2. Index files: the header of each (re-read until two reads agree) gives the entry count N;
   entries [1, N) are sent, and slots that point at entries >= N (added during the export) are
   followed back along their chains to the entry they held at N, so the copy's index is the
   index as it was at N. Index files created later are not sent.
3. Consume queue files: every queue as of one dispatch position, reput's offset read just
   before the queues are measured: each file up to its written position at that moment, cut
   back to the last unit of a record below that position (units past it were dispatched
   while the queues were being measured, for some queues and not others). A queue file created
   later, or holding only units past the position, is not sent.
4. Commitlog: sent up to the node's max offset now (`ExportManifest.commitlog_end_offset`):
   the last file only up to that point, files created later not at all. Because the queues
   and the index were measured before, they never point past the exported commitlog end
   (they may be behind it: recovery or the audit re-dispatches / reports that). A file that
   retention is deleting at the start is left out (`commitlog_min_offset` is the first
   exported offset).

Preallocated files (1 GiB commitlog files, consume queue and index files) are never sent as
zeros: only their written prefix is sent and `ExportFile.file_length` tells the receiver to
extend the file with zeros (sparse), which is what the node's file holds past that point.

Reading never takes the store lock nor any store lock across a copy, so writers are never
blocked: commitlog and consume queue files are read through the store's own mappings one chunk
at a time, each chunk under MappedFile.hold()/release() like the store's readers (a file that
retention deletes meanwhile fails the export with ABORTED: retry); index files are read with
pread() on a read-only descriptor. Bytes below a file's written position never change (except
when a slave truncates its log; then the copy holds what is there when the chunk is read).
"""
from __future__ import annotations

import os
import sys
import time
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from proto import admin_pb2 as pb
from store import layout
from store.queue.consume_queue import bytes_before
from store.index.index_file import (
    HASH_SLOT_SIZE,
    INDEX_ENTRY,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER,
    INDEX_HEADER_SIZE,
)

if TYPE_CHECKING:
    from store.commitlog.mapped_file import MappedFile
    from store.message_store import MessageStore

PARTS = (layout.COMMITLOG_DIR, layout.CONSUME_QUEUE_DIR, layout.INDEX_DIR, layout.CONFIG_DIR,
         layout.CHECKPOINT_FILE, layout.EPOCH_FILE)
DEFAULT_CHUNK_BYTES = 1 << 20
MAX_CHUNK_BYTES = 4 << 20
# Smaller chunks only cost: a chunk of 1 byte makes a message (and a server thread's loop) per
# byte of the store, which holds a worker for hours.
MIN_CHUNK_BYTES = 4 << 10
_BAD_CHARS = ("/", "\\", "\0")


class ExportRequestError(ValueError):
    """The request cannot be served as asked (INVALID_ARGUMENT)."""


class ExportAborted(Exception):
    """The export could not go on (a file vanished, the store closed): the stream fails."""


class ExportPathError(ValueError):
    """A path that is not a safe store-relative path."""


# ---------------------------------------------------------------------------------------------
# paths
# ---------------------------------------------------------------------------------------------
def export_path(*parts: str) -> str:
    """The '/'-joined store-relative path of `parts` (directory names then the file name).
    Every part must be a plain name: not empty, not '.' or '..', without '/', '\\' or NUL; so
    the result is never absolute and never climbs out of the store root."""
    if not parts:
        raise ExportPathError("empty path")
    for part in parts:
        if not isinstance(part, str) or part in ("", ".", "..") or any(c in part for c in _BAD_CHARS):
            raise ExportPathError(f"unsafe path component {part!r} in {parts!r}")
    return "/".join(parts)


def check_relative_path(path: str) -> list[str]:
    """The components of a received store-relative path; ExportPathError unless it is one
    that export_path can produce."""
    if not isinstance(path, str) or not path or path.startswith("/"):
        raise ExportPathError(f"not a relative path: {path!r}")
    parts = path.split("/")
    export_path(*parts)
    return parts


# ---------------------------------------------------------------------------------------------
# request
# ---------------------------------------------------------------------------------------------
def parse_include(include) -> tuple[str, ...]:
    """The parts to export, in PARTS order; empty -> all. Comma-separated items are split."""
    names = [n.strip() for item in include or () for n in item.split(",") if n.strip()]
    unknown = sorted(set(names) - set(PARTS))
    if unknown:
        raise ExportRequestError(f"unknown include {', '.join(unknown)}: must be among "
                                 f"{', '.join(PARTS)}")
    return tuple(p for p in PARTS if p in names) if names else PARTS


def parse_chunk_bytes(chunk_bytes: int) -> int:
    if chunk_bytes != 0 and not MIN_CHUNK_BYTES <= chunk_bytes <= MAX_CHUNK_BYTES:
        raise ExportRequestError(f"chunk_bytes {chunk_bytes} must be 0 (= {DEFAULT_CHUNK_BYTES}) "
                                 f"or within {MIN_CHUNK_BYTES}..{MAX_CHUNK_BYTES}")
    return chunk_bytes or DEFAULT_CHUNK_BYTES


# ---------------------------------------------------------------------------------------------
# sources: one per exported file
# ---------------------------------------------------------------------------------------------
class _Source:
    """One exported file: its path in the export, the bytes sent (`size`) and the length the
    receiver extends it to (`file_length`); subclasses read it whole, through the store's
    mapping, or with pread. Used by the one thread streaming the export."""

    kind = ""

    def __init__(self, path: str, size: int, file_length: int) -> None:
        self.path = path
        self.size = size
        self.file_length = file_length

    def read(self, pos: int, n: int) -> bytes:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def entry(self) -> pb.ExportFile:
        return pb.ExportFile(path=self.path, size=self.size, kind=self.kind,
                             file_length=self.file_length)


class _Whole(_Source):
    """A small file read once at the start."""

    def __init__(self, kind: str, path: str, data: bytes) -> None:
        super().__init__(path, len(data), len(data))
        self.kind = kind
        self.data = data

    def read(self, pos: int, n: int) -> bytes:
        return self.data[pos:pos + n]


class _Mapped(_Source):
    """A commitlog or consume queue file of the store, read through its mapping. Each chunk
    is copied under hold()/release(), like the store's own readers: holding a file for the
    whole export would keep retention and truncation from deleting it."""

    def __init__(self, kind: str, path: str, mf: "MappedFile", size: int) -> None:
        super().__init__(path, size, mf.file_size)
        self.kind = kind
        self.mf = mf

    def read(self, pos: int, n: int) -> bytes:
        mf = self.mf
        if not mf.hold():
            raise ExportAborted(f"{self.path} was deleted during the export; retry")
        try:
            data = bytes(mf.view[pos:pos + n])
        except (ValueError, BufferError) as e:  # unmapped under us: the store is closing
            raise ExportAborted(f"{self.path} was closed during the export ({e})") from None
        finally:
            mf.release()
        if len(data) != n:
            raise ExportAborted(f"{self.path}: short read at {pos}")
        return data


class _Index(_Source):
    """An index file read with pread(); header, slots and entries as of entry count N."""

    kind = layout.INDEX_DIR

    def __init__(self, path: str, fs_path: str, hash_slot_num: int, index_num: int) -> None:
        self.fd = os.open(fs_path, os.O_RDONLY)
        try:
            self.slots_end = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
            file_length = self.slots_end + index_num * INDEX_ENTRY_SIZE
            self.header = self._stable_header()
            count = INDEX_HEADER.unpack(self.header)[5]
            self.count = min(max(count, 1), index_num)
        except BaseException:
            os.close(self.fd)
            raise
        super().__init__(path, self.slots_end + self.count * INDEX_ENTRY_SIZE, file_length)

    def _pread(self, n: int, pos: int) -> bytes:
        return os.pread(self.fd, n, pos)

    def _stable_header(self) -> bytes:
        """The header is rewritten in place on every put: read it until two reads agree."""
        last = self._pread(INDEX_HEADER_SIZE, 0)
        for _ in range(100):
            again = self._pread(INDEX_HEADER_SIZE, 0)
            if again == last:
                return last
            last = again
        return last

    def _as_of_count(self, n: int) -> int:
        """The entry number a slot that now says `n` held when the count was self.count."""
        for _ in range(1 << 20):
            if n < self.count:
                return n
            raw = self._pread(INDEX_ENTRY_SIZE, self.slots_end + n * INDEX_ENTRY_SIZE)
            if len(raw) != INDEX_ENTRY_SIZE:
                return 0
            prev = INDEX_ENTRY.unpack(raw)[3]
            if prev <= 0 or prev >= n:  # end of chain, or a chain that is not older: empty
                return 0
            n = prev
        return 0

    def _patch_slots(self, raw: bytes) -> bytes:
        slots = array("i", raw)
        if sys.byteorder == "little":
            slots.byteswap()
        if max(slots, default=0) < self.count:
            return raw
        for i, n in enumerate(slots):
            if n >= self.count:
                slots[i] = self._as_of_count(n)
        if sys.byteorder == "little":
            slots.byteswap()
        return slots.tobytes()

    def read(self, pos: int, n: int) -> bytes:
        end = pos + n
        lo, hi = pos, end
        s_lo, s_hi = max(pos, INDEX_HEADER_SIZE), min(end, self.slots_end)
        if s_lo < s_hi:  # widen to whole slots so they can be patched
            lo = min(lo, s_lo - (s_lo - INDEX_HEADER_SIZE) % HASH_SLOT_SIZE)
            hi = max(hi, s_hi + (-(s_hi - INDEX_HEADER_SIZE)) % HASH_SLOT_SIZE)
        data = bytearray(self._pread(hi - lo, lo))
        if len(data) != hi - lo:
            raise ExportAborted(f"{self.path}: short read at {lo}")
        if s_lo < s_hi:
            a = s_lo - (s_lo - INDEX_HEADER_SIZE) % HASH_SLOT_SIZE
            b = s_hi + (-(s_hi - INDEX_HEADER_SIZE)) % HASH_SLOT_SIZE
            data[a - lo:b - lo] = self._patch_slots(bytes(data[a - lo:b - lo]))
        if lo < INDEX_HEADER_SIZE:
            h_end = min(INDEX_HEADER_SIZE, hi)
            data[0:h_end - lo] = self.header[lo:h_end]
        return bytes(data[pos - lo:end - lo])

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# ---------------------------------------------------------------------------------------------
# the export
# ---------------------------------------------------------------------------------------------
@dataclass
class ExportStats:
    """One export's progress: files and bytes sent of the total, whether it completed, and
    the commitlog end offset it covered."""

    files: int = 0
    bytes_sent: int = 0
    total_bytes: int = 0
    complete: bool = False
    commitlog_end_offset: int = 0
    started: float = field(default_factory=time.monotonic)


class StoreExport:
    """One export of `store`. Raises ExportRequestError for a bad request; messages() is the
    stream (it pins files while it runs and releases them when it ends or is closed)."""

    def __init__(self, store: "MessageStore", include=(), chunk_bytes: int = 0, *,
                 node_id: str = "", role: str = "") -> None:
        self.store = store
        self.parts = parse_include(include)
        self.chunk_bytes = parse_chunk_bytes(chunk_bytes)
        self.node_id = node_id
        self.role = role
        self.stats = ExportStats()

    # -- snapshot ----------------------------------------------------------------------------
    def _small_files(self, sources: list[_Source]) -> None:
        root = self.store.root

        def whole(kind: str, fs_path: str, *parts: str) -> None:
            try:
                with open(fs_path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                return
            sources.append(_Whole(kind, export_path(*parts), data))

        for name in (layout.CHECKPOINT_FILE, layout.EPOCH_FILE):
            if name in self.parts:
                whole(name, os.path.join(root, name), name)
        if layout.CONFIG_DIR in self.parts:
            config_dir = layout.StoreLayout(root).config_dir
            try:
                names = sorted(os.listdir(config_dir))
            except (FileNotFoundError, NotADirectoryError):
                names = []
            for name in names:
                fs_path = os.path.join(config_dir, name)
                if name.endswith(layout.CONFIG_FILE_SUFFIX) and os.path.isfile(fs_path) and not os.path.islink(fs_path):
                    whole(layout.CONFIG_DIR, fs_path, layout.CONFIG_DIR, name)

    def _index_files(self, sources: list[_Source]) -> None:
        if layout.INDEX_DIR not in self.parts:
            return
        for ix in self.store.index_files():
            try:
                sources.append(_Index(export_path(layout.INDEX_DIR, os.path.basename(ix.path)), ix.path,
                                      ix.hash_slot_num, ix.index_num))
            except FileNotFoundError:  # deleted by retention just now
                continue

    def _consume_queues(self, sources: list[_Source]) -> None:
        if layout.CONSUME_QUEUE_DIR not in self.parts:
            return
        # Every record below the dispatch position has its unit in its queue by now; the
        # queues are measured one after another while reput goes on, so each is cut back to
        # this one position (else a queue measured later holds records that one measured
        # earlier lacks, and the copy has holes).
        dispatched = self.store.dispatched_offset
        queues = sorted(self.store.consume_queues(), key=lambda q: (q.topic, q.queue_id))
        for cq in queues:
            for mf in cq.mfq.snapshot():
                size = min(mf.read_position, mf.file_size)
                if not mf.available:
                    continue  # being deleted by retention: an expired file
                kept = bytes_before(mf, dispatched, size)
                if kept == 0 and size > 0:
                    break  # this file and the later ones hold only records dispatched since
                sources.append(_Mapped(layout.CONSUME_QUEUE_DIR, export_path(
                    layout.CONSUME_QUEUE_DIR, cq.topic, str(cq.queue_id), os.path.basename(mf.path)), mf,
                    kept))
                if kept < size:
                    break

    def _commitlog(self, sources: list[_Source]) -> tuple[int, int]:
        end = self.store.max_phy_offset()
        files = [f for f in self.store.commitlog_files() if f.file_from_offset < end]
        while files and not files[0].available:
            files.pop(0)  # the oldest files, being deleted by retention
        if any(not f.available for f in files):
            raise ExportAborted("the commitlog is being truncated; retry the export")
        start = files[0].file_from_offset if files else end
        if layout.COMMITLOG_DIR in self.parts:
            sources.extend(_Mapped(layout.COMMITLOG_DIR, export_path(layout.COMMITLOG_DIR, os.path.basename(f.path)),
                                   f, min(f.file_size, end - f.file_from_offset)) for f in files)
        return start, end

    # -- stream ------------------------------------------------------------------------------
    def messages(self) -> Iterator[pb.ExportChunk]:
        sources: list[_Source] = []
        try:
            self._small_files(sources)
            self._index_files(sources)
            self._consume_queues(sources)
            cl_min, cl_end = self._commitlog(sources)
            # send order: small files, commitlog, consume queues, index
            order = {layout.COMMITLOG_DIR: 1, layout.CONSUME_QUEUE_DIR: 2, layout.INDEX_DIR: 3}
            sources.sort(key=lambda s: order.get(s.kind, 0))
            stats = self.stats
            stats.total_bytes = sum(s.size for s in sources)
            stats.commitlog_end_offset = cl_end
            yield pb.ExportChunk(manifest=pb.ExportManifest(
                files=[s.entry() for s in sources], total_bytes=stats.total_bytes,
                commitlog_min_offset=cl_min, commitlog_end_offset=cl_end,
                commitlog_file_size=self.store.commitlog_file_size, node_id=self.node_id,
                role=self.role, started_at_ms=time.time_ns() // 1_000_000,
                include=list(self.parts), chunk_bytes=self.chunk_bytes))
            for src in sources:
                pos = 0
                while True:
                    n = min(self.chunk_bytes, src.size - pos)
                    data = src.read(pos, n) if n > 0 else b""
                    stats.bytes_sent += n
                    done = pos + n >= src.size
                    yield pb.ExportChunk(chunk=pb.FileChunk(
                        path=src.path, offset=pos, data=data, file_done=done,
                        bytes_sent_total=stats.bytes_sent))
                    pos += n
                    if done:
                        break
                src.close()
                stats.files += 1
            stats.complete = True
            yield pb.ExportChunk(done=True)
        finally:
            for src in sources:
                src.close()

"""The one walk over commitlog bytes: record after record, from a BLANK on to the next file,
stopping at the first thing that is not a record, with the reason as a type.

Used by reput (store.reput), the reader (store.reader), recovery (store.recovery), the read-only
StoreReader (store.readonly) and the audit's executors (cluster.audit). `CommitLogWalk.file` is
the loop; `files` (a run of files, e.g. a snapshot or a read-only directory) and `mapped` (the
live commitlog: each file held while it is walked) feed it file after file.

What lies at a position (codec.check_record) decides the step:

    RECORD      yielded as (offset, value); the walk goes on after it
    BLANK       the end-of-file filler: the file is done, the walk goes on in the next file
                (`blank_at` / `blank_size` remember it)
    EMPTY       stop EMPTY: a zero header, nothing is written here (yet)
    NEED_MORE   stop NEED_MORE: the record runs past the readable bytes (a torn tail, or bytes
                still being written)
    CORRUPT     stop CORRUPT: bad magic, impossible field lengths or a CRC mismatch

`value` is the record's size, or with a `decode` function (e.g. codec.dispatch_fields, reput's
one-pass decode) what it returned: a tuple whose first item is the record's totalSize, or None
exactly when check_record without CRC would not say RECORD. Only when decode returns None does
the walk ask check_record what lies there (a RECORD then counts as CORRUPT: decode refused it).

`offset` tells where the walk stands. While the caller holds a yielded record it is that
record's offset, so a caller that breaks out of the loop (a failed dispatch, a budget) resumes
at exactly that record; when the walk ends it is where it stopped, with `stop` saying why.
"""
from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from store import codec
from store.codec import RecordKind

if TYPE_CHECKING:
    from .mapped_file_queue import MappedFileQueue

Decode = Callable[[Any, int, int], "tuple[Any, ...] | None"]
FileBytes = "tuple[int, memoryview, int]"  # (first offset of the file, its bytes, its size)


class Stop(Enum):
    """Why a walk stopped (no stop: it went through every file it was given)."""

    LIMIT = "limit"  # reached the readable end or the caller's `until`: nothing more for now
    EMPTY = "empty"  # zero header: nothing is written here
    NEED_MORE = "need_more"  # a record runs past the readable bytes
    CORRUPT = "corrupt"  # bad magic, impossible field lengths or a CRC mismatch
    GAP = "gap"  # the next file does not start where the previous one ended
    NO_FILE = "no_file"  # no (live) file holds the offset: deleted, or past the end

    @property
    def in_data(self) -> bool:
        """EMPTY, NEED_MORE or CORRUPT: the bytes at the stop offset are not a record."""
        return self in _DATA_STOPS


_DATA_STOPS = frozenset((Stop.EMPTY, Stop.NEED_MORE, Stop.CORRUPT))
_STOP_OF_KIND = {RecordKind.EMPTY: Stop.EMPTY, RecordKind.NEED_MORE: Stop.NEED_MORE,
                 RecordKind.CORRUPT: Stop.CORRUPT, RecordKind.RECORD: Stop.CORRUPT}


class CommitLogWalk:
    """One walk: its options, and where it stands (see the module docstring)."""

    __slots__ = ("decode", "check_crc", "verify_prop_crc", "offset", "stop", "blank_at",
                 "blank_size", "gap", "base", "view")

    def __init__(self, *, decode: Decode | None = None, check_crc: bool = False,
                 verify_prop_crc: bool = False) -> None:
        self.decode = decode
        self.check_crc = check_crc
        self.verify_prop_crc = verify_prop_crc
        self.offset = 0
        self.stop: Stop | None = None
        self.blank_at: int | None = None  # offset of the BLANK that ended the last file walked
        self.blank_size = 0  # the size it states (the rest of its file when well formed)
        self.gap: tuple[int, int] | None = None  # (expected file offset, found) with Stop.GAP
        self.base = 0  # first offset of the file being walked
        self.view: Any = b""  # its bytes (valid while its record is held by the caller)

    def file(self, view: Any, base: int, pos: int, limit: int, file_size: int,
             until: int | None = None) -> Iterator[tuple[int, Any]]:
        """The records of one file (first offset `base`) starting at file position `pos`:
        records must end by `limit` (readable bytes), and none starts at or after `until`
        (a file position, default `limit`). Afterwards `stop` is None when the file is done
        (its end or its BLANK reached, so a walk goes on in the next file), else why not."""
        self.base, self.view, self.stop, self.blank_at = base, view, None, None
        stop_at = limit if until is None or until > limit else until
        decode, check = self.decode, codec.check_record
        check_crc, prop_crc = self.check_crc, self.verify_prop_crc
        record = RecordKind.RECORD
        try:
            while pos < stop_at:
                if decode is not None:
                    value = decode(view, pos, limit)
                    n = value[0] if value is not None else 0
                else:
                    kind, n = check(view, pos, limit, check_crc, prop_crc)
                    value = n if kind is record else None
                if value is None:
                    kind, n = check(view, pos, limit, False)
                    if kind is RecordKind.BLANK:
                        self.blank_at, self.blank_size = base + pos, n
                        pos = file_size
                    else:
                        self.stop = _STOP_OF_KIND[kind]
                    return
                self.offset = base + pos
                yield base + pos, value
                pos += n
            if pos < file_size:
                self.stop = Stop.LIMIT
        finally:
            self.offset = base + pos

    def files(self, files: Iterable[tuple[int, Any, int]],
              file_done: Callable[[int], None] | None = None,
              again: Callable[[int, Stop], bool] | None = None) -> Iterator[tuple[int, Any]]:
        """Every file of `files` ((base, bytes, size), in offset order) from its start, each
        ending where the next begins. `file_done(end offset)` is called after each file (the
        walk's blank_at tells whether a BLANK ended it); `again(offset, stop)` may wait and
        return True to look again at a data stop (a running store may be writing there)."""
        expected: int | None = None
        for base, view, size in files:
            if expected is not None and base != expected:
                self.offset, self.stop, self.gap = expected, Stop.GAP, (expected, base)
                return
            pos = 0
            while True:
                yield from self.file(view, base, pos, size, size)
                stop = self.stop
                if stop is None or not stop.in_data or again is None or not again(self.offset, stop):
                    break
                pos = self.offset - base
            if self.stop is not None:
                return
            expected = base + size
            if file_done is not None:
                file_done(expected)

    def mapped(self, queue: "MappedFileQueue", start: int, end: int,
               until: int | None = None) -> Iterator[tuple[int, Any]]:
        """The live commitlog from `start` (a record boundary) up to `end`: each file is held
        (MappedFile.hold) while it is walked and read up to its readable end; no record starts
        at or after `until` (default `end`). Close the iterator when leaving it early."""
        offset = start
        self.offset = start
        stop_at = end if until is None or until > end else until
        while offset < stop_at:
            f = queue.find_by_offset(offset)
            if f is None or not f.hold():
                self.stop = Stop.NO_FILE
                return
            try:
                base = f.file_from_offset
                yield from self.file(f.view, base, offset - base,
                                     min(f.read_position, end - base), f.file_size,
                                     stop_at - base)
            finally:
                f.release()
            if self.stop is not None:
                return
            offset = self.offset
        self.stop = Stop.LIMIT


def stop_reason(view: Any, pos: int, limit: int, stop: Stop, check_crc: bool) -> str:
    """Why the bytes at `pos` are not a record, in words (for a data stop)."""
    if stop is Stop.EMPTY:
        return "end of data (zero header)"
    res = codec.decode(view, pos, limit, check_crc=check_crc, read_body=False)
    if isinstance(res, codec.Corrupt):
        return res.reason
    if isinstance(res, codec.NeedMore):
        return f"torn record: needs {res.needed} bytes, {res.available} left in the file"
    return stop.name.lower()

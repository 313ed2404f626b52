"""RocketMQ's `checkpoint` file: the timestamps up to which each structure is known durable.

Recovery uses them to decide where an abnormal restart may start re-dispatching the commitlog
(`min_timestamp()`), and replication uses the two offsets. Byte layout, all big-endian signed
64-bit integers, identical to RocketMQ's StoreCheckpoint so a file can be moved between the two:

    offset  size  field                 attribute
    ------  ----  --------------------  ---------------------
         0     8  physicMsgTimestamp    physic_msg_timestamp
         8     8  logicsMsgTimestamp    logics_msg_timestamp
        16     8  indexMsgTimestamp     index_msg_timestamp
        24     8  masterFlushedOffset   master_flushed_offset
        32     8  confirmPhyOffset      confirm_phy_offset
        40  4056  zeros (reserved)
    total 4096

RocketMQ writes the file through an mmap in place, so a crash in the middle of a write can leave
a torn page. Here every flush writes the whole 4096-byte image to `checkpoint.tmp`, fsyncs it and
renames it over `checkpoint` (FileIO.write_file_atomic): after a crash the file holds the old or
the new values, never a mix.
"""
from __future__ import annotations

import struct
import threading
from typing import Any, Callable, NamedTuple

from store.errors import DiskError
from .commitlog.fileio import DEFAULT_FILE_IO, FileIO

CHECKPOINT_FILE_SIZE = 4096
_FIELDS = struct.Struct(">qqqqq")
_PADDING = bytes(CHECKPOINT_FILE_SIZE - _FIELDS.size)
# RocketMQ backs the timestamps off by 3 s: a message stored in the same instant as the
# checkpoint might not be covered by it, so recovery starts a little earlier than recorded.
TIMESTAMP_SAFETY_MARGIN_MS = 3000
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1


class CheckpointFields(NamedTuple):
    """The five values of a checkpoint image, in file order."""

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0


class _static_or_bound:
    """`StoreCheckpoint.encode(a, b, ...)` encodes explicit values, `cp.encode()` encodes the
    instance's attributes. Without this, calling a plain staticmethod on an instance with no
    arguments would silently encode zeros instead of the instance's values."""

    def __init__(self, fn: Callable[..., bytes]) -> None:
        self._fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj: Any, owner: type) -> Callable[..., bytes]:
        if obj is None:
            return self._fn
        return lambda: self._fn(*(getattr(obj, f) for f in CheckpointFields._fields))


class StoreCheckpoint:
    """In-memory copy of the checkpoint file. Set the attributes, then `flush()`.

    After `load()`: `existed` tells whether a well-formed file was found; `damaged` is True
    (with `damage_reason`) when a file was there but had the wrong size or could not be read.
    A damaged file is treated as missing: all fields zero, so `min_timestamp()` is 0 and
    recovery falls back to the most conservative start (the first commitlog file)."""

    def __init__(self, path: str, io: FileIO = DEFAULT_FILE_IO) -> None:
        self.path = path
        self.io = io
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.master_flushed_offset = 0
        self.confirm_phy_offset = 0
        self.existed = False
        self.damaged = False
        self.damage_reason: str | None = None
        # Two concurrent flushes would both write `checkpoint.tmp`; serialise them.
        self._flush_lock = threading.Lock()

    # -- encoding ---------------------------------------------------------------------------
    @_static_or_bound
    def encode(
        physic_msg_timestamp: int = 0,
        logics_msg_timestamp: int = 0,
        index_msg_timestamp: int = 0,
        master_flushed_offset: int = 0,
        confirm_phy_offset: int = 0,
    ) -> bytes:
        """The 4096-byte file image of the given field values (on an instance, of its
        attributes)."""
        values = (physic_msg_timestamp, logics_msg_timestamp, index_msg_timestamp,
                  master_flushed_offset, confirm_phy_offset)
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or not _I64_MIN <= v <= _I64_MAX:
                raise ValueError(f"checkpoint field {v!r} is not a signed 64-bit integer")
        return _FIELDS.pack(*values) + _PADDING

    @staticmethod
    def decode(data: bytes) -> CheckpointFields:
        """Field values of a 4096-byte image, keyed by attribute name. Raises ValueError on any
        other size (a checkpoint of a different size was not written by us or is truncated)."""
        if len(data) != CHECKPOINT_FILE_SIZE:
            raise ValueError(f"checkpoint image is {len(data)} bytes, expected {CHECKPOINT_FILE_SIZE}")
        # The reserved tail is not checked: a future version may use it, like RocketMQ did
        # when it added masterFlushedOffset and confirmPhyOffset.
        return CheckpointFields(*_FIELDS.unpack_from(data, 0))

    def fields(self) -> CheckpointFields:
        """The current attribute values."""
        return CheckpointFields(*(getattr(self, f) for f in CheckpointFields._fields))

    # -- persistence ---------------------------------------------------------------------
    @classmethod
    def load(cls, path: str, io: FileIO = DEFAULT_FILE_IO) -> "StoreCheckpoint":
        """Read `path`. Never raises for a missing, short, oversized or unreadable file: those
        yield an all-zero checkpoint (see the class docstring). A leftover `checkpoint.tmp`
        from an interrupted flush is ignored; the next flush overwrites it."""
        cp = cls(path, io)
        try:
            data = io.read_file(path)
        except FileNotFoundError:
            return cp
        except OSError as e:
            cp._mark_damaged(f"cannot read {path}: [errno {e.errno}] {e.strerror}")
            return cp
        try:
            fields = cls.decode(data)
        except ValueError as e:
            cp._mark_damaged(f"{path}: {e}")
            return cp
        for name, value in fields._asdict().items():
            setattr(cp, name, value)
        cp.existed = True
        return cp

    def _mark_damaged(self, reason: str) -> None:
        self.existed = False
        self.damaged = True
        self.damage_reason = reason

    def flush(self) -> None:
        """Persist all fields crash-safely. Raises DiskError (old file content intact) when any
        step fails; the failure is not retried (see store.commitlog.fileio on fsync errors)."""
        with self._flush_lock:
            image = self.encode()
            try:
                self.io.write_file_atomic(self.path, image)
            except OSError as e:
                raise DiskError("flush checkpoint", self.path, e) from e

    # -- derived values ----------------------------------------------------------------------
    def min_timestamp(self) -> int:
        """min(physic, logics) minus the 3 s safety margin, never below 0: messages stored at or
        after this time may be missing from the consume queues after a crash."""
        m = min(self.physic_msg_timestamp, self.logics_msg_timestamp) - TIMESTAMP_SAFETY_MARGIN_MS
        return max(m, 0)

    def min_timestamp_index(self) -> int:
        """Like min_timestamp() but also covered by the index file (used when messageIndexSafe
        is on). The index timestamp gets the same 3 s margin; never below 0."""
        m = min(self.min_timestamp(), self.index_msg_timestamp - TIMESTAMP_SAFETY_MARGIN_MS)
        return max(m, 0)

    def __repr__(self) -> str:
        return (
            f"StoreCheckpoint(path={self.path!r}, physic={self.physic_msg_timestamp}, "
            f"logics={self.logics_msg_timestamp}, index={self.index_msg_timestamp}, "
            f"master_flushed_offset={self.master_flushed_offset}, "
            f"confirm_phy_offset={self.confirm_phy_offset})"
        )


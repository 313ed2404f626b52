"""The pipe between a store and its index process (index_process.py, the parent's end;
index_worker.py, the child's). Both ends run the same interpreter from the same checkout,
so a payload is `marshal` of plain tuples, lists, str, int, bool and None.

One frame per request and per reply, read and written whole:

    offset  size    field
    ------  ------  ---------------------------------------------------------------
    0       4       length   u32 big-endian: bytes of the payload that follows
    4       length  payload  marshal.dumps of a tuple

Requests (parent -> child), one at a time, each answered before the next is sent:

    ("load", last_exit_ok, index_msg_timestamp)     -> notes (list of str)
    ("put", entries, now_ms)                         -> None; entries: [(topic#key, phy, ts)]
    ("end",)                                         -> end_phy_offset of the newest file
    ("query", topic, key, max_num, begin_ts, end_ts, max_phy_offset or None) -> [phy, ...]
    ("delete_expired", min_phy_offset, now_ms)       -> files deleted
    ("truncate", phy_offset)                         -> entries and files removed
    ("flush", sealed_only)                           -> newest full file's endTimestamp (0: none)
    ("files",)                                       -> [(path, hash_slot_num, index_num)]
    ("close",)                                       -> None, then the child exits

Replies: ("ok", value) or ("error", kind, message, errno, strerror, operation, path), where
kind names a store error the parent raises again as the same type (`raise_error`).
"""
from __future__ import annotations

import marshal
import struct
from typing import Any, BinaryIO

from .errors import CorruptFile, CreateFileError, DiskError, StoreError

FRAME_HEADER = struct.Struct(">I")  # the length field of the table above
MAX_FRAME = 1 << 30  # a length past this is a broken pipe, not a request


class IndexProcessError(StoreError):
    """The index process died, could not start, or failed in a way that is not a store error
    of its own (its message says which)."""


def write_frame(out: BinaryIO, value: tuple) -> None:
    payload = marshal.dumps(value)
    out.write(FRAME_HEADER.pack(len(payload)) + payload)
    out.flush()


def read_frame(src: BinaryIO) -> tuple | None:
    """The next frame's tuple; None at a clean end of the stream (nothing of a frame read).
    Raises IndexProcessError for a torn or impossible frame."""
    head = src.read(FRAME_HEADER.size)
    if not head:
        return None
    if len(head) < FRAME_HEADER.size:
        raise IndexProcessError("index pipe closed inside a frame header")
    (length,) = FRAME_HEADER.unpack(head)
    if length > MAX_FRAME:
        raise IndexProcessError(f"index pipe frame of {length} bytes: the stream is broken")
    payload = src.read(length)
    if len(payload) < length:
        raise IndexProcessError(f"index pipe closed inside a frame ({len(payload)} of "
                                f"{length} bytes)")
    value = marshal.loads(payload)
    if not isinstance(value, tuple) or not value:
        raise IndexProcessError(f"index pipe frame is not a request or reply: {value!r:.80}")
    return value


def error_reply(e: BaseException) -> tuple:
    """The reply carrying `e`: enough to raise the same store error in the parent."""
    cause = getattr(e, "cause", None)
    return ("error", type(e).__name__, str(e),
            getattr(cause, "errno", None), getattr(cause, "strerror", None),
            getattr(e, "operation", None), getattr(e, "path", None))


def raise_error(reply: tuple) -> None:
    """Raise the store error an ("error", ...) reply describes."""
    _, kind, message, errno, strerror, operation, path = reply
    cause = OSError(errno, strerror) if errno is not None else None
    if kind == "DiskError" and cause is not None:
        raise DiskError(operation or "index write", path or "", cause)
    if kind == "CreateFileError" and cause is not None:
        raise CreateFileError(path or "", cause)
    if kind == "CorruptFile":
        raise CorruptFile(message)
    raise IndexProcessError(f"index process: {kind}: {message}")


def ok_value(reply: Any) -> Any:
    """The value of an ("ok", value) reply; raises what an ("error", ...) reply carries."""
    if reply[0] == "ok":
        return reply[1]
    if reply[0] == "error" and len(reply) == 7:
        raise_error(reply)
    raise IndexProcessError(f"index process answered {reply!r:.80}")

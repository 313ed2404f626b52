"""The pipe between a store and its index process (index_process.py, the parent's end;
index_worker.py, the child's). Both ends run the same interpreter from the same checkout,
so a payload is `marshal` of plain tuples, lists, str, int, bool and None.

One frame (common/pipe_frames.py) per request and per reply.

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

from typing import Any

from store.errors import CorruptFile, CreateFileError, DiskError
from common.pipe_frames import PipeError, read_frame, write_frame
from store.errors import StoreError

__all__ = ["IndexProcessError", "error_reply", "ok_value", "raise_error", "read_frame",
           "write_frame"]


class IndexProcessError(PipeError, StoreError):
    """The index process died, could not start, or failed in a way that is not a store error
    of its own (its message says which)."""


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

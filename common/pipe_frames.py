"""Frames on the pipe between a process and a child of the same checkout (the index
process, store/index/index_wire.py; the conversion process, cluster/consume/conversion_process.py).
Both ends run the same interpreter, so a payload is `marshal` of plain tuples, lists, bytes,
str, int, bool and None.

    offset  size    field
    ------  ------  ---------------------------------------------------------------
    0       4       length   u32 big-endian: bytes of the payload that follows
    4       length  payload  marshal.dumps of a non-empty tuple

`write_frame` / `read_frame` serve blocking streams; `FrameDecoder` takes whatever a
non-blocking read returned and hands back the frames completed so far. `child_main` is a
child's process entry: its arguments, its logging, stdout kept for the replies.
"""
from __future__ import annotations

import logging
import marshal
import os
import struct
import sys
from typing import BinaryIO, Callable

FRAME_HEADER = struct.Struct(">I")  # the length field of the table above
MAX_FRAME = 1 << 30  # a length past this is a broken pipe, not a request
PIPE_READ = 65536  # a pipe holds 64 KiB: a larger non-blocking read only allocates more


class PipeError(Exception):
    """The pipe to or from a child process broke: closed inside a frame, or bytes that are
    not a frame."""


def child_main(name: str, usage: str, argv: list[str] | None, nargs: int,
               run: Callable[[list[str], BinaryIO], None]) -> int:
    """A child process: `run(args, replies)` with its `nargs` arguments, logging to stderr as
    `name`, stdout kept for the replies (whatever else prints goes to stderr instead of
    corrupting a frame). Exit status 2 for a bad command line, 1 when `run` failed, 0 when it
    returned or the parent closed the pipe first (nobody left to answer)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != nargs:
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format=f"%(asctime)s {name} %(levelname)s %(message)s")
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    try:
        run(args, replies)
    except BrokenPipeError:
        return 0
    except Exception:
        logging.getLogger(name).exception("%s failed", name)
        return 1
    return 0


def encode_frame(value: tuple) -> bytes:
    payload = marshal.dumps(value)
    return FRAME_HEADER.pack(len(payload)) + payload


def write_frame(out: BinaryIO, value: tuple) -> None:
    out.write(encode_frame(value))
    out.flush()


def _payload(payload) -> tuple:
    value = marshal.loads(payload)
    if not isinstance(value, tuple) or not value:
        raise PipeError(f"pipe frame is not a request or reply: {value!r:.80}")
    return value


def _checked_length(head: bytes) -> int:
    (length,) = FRAME_HEADER.unpack(head)
    if length > MAX_FRAME:
        raise PipeError(f"pipe frame of {length} bytes: the stream is broken")
    return length


def read_frame(src: BinaryIO) -> tuple | None:
    """The next frame's tuple; None at a clean end of the stream (nothing of a frame read).
    Raises PipeError for a torn or impossible frame."""
    head = src.read(FRAME_HEADER.size)
    if not head:
        return None
    if len(head) < FRAME_HEADER.size:
        raise PipeError("pipe closed inside a frame header")
    length = _checked_length(head)
    payload = src.read(length)
    if len(payload) < length:
        raise PipeError(f"pipe closed inside a frame ({len(payload)} of {length} bytes)")
    return _payload(payload)


class FrameDecoder:
    """The frames of a byte stream fed in pieces (a non-blocking reader's). Owns the bytes
    of the frame not yet complete; used by one thread."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def inside_frame(self) -> bool:
        """Part of a frame is buffered (an end of the stream here tears it)."""
        return bool(self._buffer)

    def feed(self, data: bytes) -> list[tuple]:
        buffer = self._buffer
        if buffer:
            buffer += data
            data = bytes(buffer)
        view = memoryview(data)  # the payloads are unmarshalled in place, not copied out
        frames, pos, end = [], 0, len(data)
        while end - pos >= FRAME_HEADER.size:
            length = _checked_length(data[pos:pos + FRAME_HEADER.size])
            start = pos + FRAME_HEADER.size
            if end - start < length:
                break
            frames.append(_payload(view[start:start + length]))
            pos = start + length
        self._buffer = bytearray(view[pos:])
        return frames

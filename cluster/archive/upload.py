"""Receiving one commitlog file on the archive: the checks and the file handling of a ShipFile
stream, without gRPC (the servicer feeds it the stream's messages).

    begin(header)   checks the header, opens `<name>.part` at header.resume_from (a partial
                    file from an interrupted stream is cut back to that length, and its bytes
                    so far are checksummed again)
    block(block)    decompresses one block (bounded: a block never inflates past its stated
                    raw length), checks its CRC-32C, appends it
    finish()        checks that all file_size bytes came and that their CRC-32C is the
                    header's, fsyncs the file, renames it to its final name, fsyncs the
                    directory. Only then may the archive acknowledge the file.

A whole-file checksum mismatch removes the partial file (the next stream starts from 0: a
file is never kept half right). Any other refusal leaves the partial file for a resume.
Errors are `UploadRefused` with the gRPC status name they map to.
"""
from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from typing import BinaryIO

from common.crc import crc32c, crc32c_extend
from store.commitlog.fileio import DEFAULT_FILE_IO
from store.layout import offset_file_name

CODECS = ("zlib", "none")
MAX_FILE_SIZE = 1 << 32  # RocketMQ's commitlog files are 1 GiB by default; never above 4 GiB
MAX_BLOCK = 16 << 20  # raw bytes of one block
PART_SUFFIX = ".part"
_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.%-]{0,126}$")


class UploadRefused(Exception):
    """A refusal of the stream; `code` is a grpc.StatusCode name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def check_group_name(name: str) -> str:
    """A broker group's name is a directory of the archive: no separators, no dot-dot."""
    if not _GROUP_NAME.match(name) or ".." in name:
        raise UploadRefused("INVALID_ARGUMENT", f"broker group {name!r}: want 1-127 of "
                            f"letters, digits, '_', '.', '%', '-' (no '..')")
    return name


@dataclass(frozen=True)
class UploadHeader:
    """What a ShipHeader says, checked."""

    broker_group: str
    file_offset: int
    file_size: int
    resume_from: int
    file_crc32c: int
    codec: str
    source_node: str = ""

    def __post_init__(self) -> None:
        check_group_name(self.broker_group)
        if not 4096 <= self.file_size <= MAX_FILE_SIZE:
            raise UploadRefused("INVALID_ARGUMENT", f"file_size {self.file_size}: want 4096.."
                                f"{MAX_FILE_SIZE}")
        if self.file_offset < 0 or self.file_offset % self.file_size:
            raise UploadRefused("INVALID_ARGUMENT", f"file_offset {self.file_offset} is not a "
                                f"multiple of file_size {self.file_size}")
        if not 0 <= self.resume_from <= self.file_size:
            raise UploadRefused("INVALID_ARGUMENT", f"resume_from {self.resume_from} is outside "
                                f"0..{self.file_size}")
        if self.codec not in CODECS:
            raise UploadRefused("INVALID_ARGUMENT", f"codec {self.codec!r}: want one of "
                                f"{', '.join(CODECS)}")

    @property
    def name(self) -> str:
        return offset_file_name(self.file_offset)


def partial_bytes(directory: str, file_offset: int) -> int:
    """Bytes of an interrupted upload of that file on disk (0: none)."""
    try:
        return os.path.getsize(os.path.join(directory, offset_file_name(file_offset)
                                            + PART_SUFFIX))
    except FileNotFoundError:
        return 0


def file_crc32c(path: str, length: int | None = None, block: int = 8 << 20) -> int:
    """CRC-32C of the first `length` bytes (all by default) of a file."""
    crc = 0
    left = os.path.getsize(path) if length is None else length
    with open(path, "rb") as fh:
        while left > 0:
            data = fh.read(min(block, left))
            if not data:
                raise UploadRefused("DATA_LOSS", f"{path} is shorter than {length} bytes")
            crc = crc32c_extend(crc, data)
            left -= len(data)
    return crc


class FileUpload:
    """One file being received into `directory` (a group's commitlog directory). Owns the
    partial file's handle; used by one stream's thread only."""

    def __init__(self, directory: str, header: UploadHeader) -> None:
        self.directory = directory
        self.header = header
        self.final_path = os.path.join(directory, header.name)
        self.part_path = self.final_path + PART_SUFFIX
        self.position = header.resume_from
        self.stored = 0  # raw bytes this stream wrote
        self.received = 0  # compressed bytes this stream carried
        self._crc = 0
        self._fh: BinaryIO | None = None

    def begin(self) -> None:
        h = self.header
        os.makedirs(self.directory, exist_ok=True)
        if h.resume_from:
            have = partial_bytes(self.directory, h.file_offset)
            if have < h.resume_from:
                raise UploadRefused("FAILED_PRECONDITION", f"cannot resume {h.name} at "
                                    f"{h.resume_from}: the archive holds {have} bytes of it "
                                    f"(ask FileStatus)")
            self._fh = open(self.part_path, "r+b")
            self._fh.truncate(h.resume_from)
            self._crc = file_crc32c(self.part_path, h.resume_from)
            self._fh.seek(h.resume_from)
        else:
            self._fh = open(self.part_path, "wb")

    def block(self, data: bytes, raw_length: int, raw_crc32c: int) -> None:
        h = self.header
        if self._fh is None:
            raise UploadRefused("FAILED_PRECONDITION", "a block before the header")
        if not 0 < raw_length <= MAX_BLOCK:
            raise UploadRefused("INVALID_ARGUMENT", f"block raw_length {raw_length}: want "
                                f"1..{MAX_BLOCK}")
        if self.position + raw_length > h.file_size:
            raise UploadRefused("INVALID_ARGUMENT", f"block ends at {self.position + raw_length}"
                                f", past the file's {h.file_size} bytes")
        raw = self._decompress(data, raw_length)
        if len(raw) != raw_length or crc32c(raw) != raw_crc32c:
            raise UploadRefused("DATA_LOSS", f"block at {self.position} of {h.name}: "
                                f"{len(raw)} bytes, CRC-32C {crc32c(raw):#010x}; the block says "
                                f"{raw_length} bytes, {raw_crc32c:#010x}")
        self._fh.write(raw)
        self._crc = crc32c_extend(self._crc, raw)
        self.position += raw_length
        self.stored += raw_length
        self.received += len(data)

    def _decompress(self, data: bytes, raw_length: int) -> bytes:
        if self.header.codec == "none":
            return data
        d = zlib.decompressobj()
        try:
            raw = d.decompress(data, raw_length + 1)  # never inflate past what it claims
        except zlib.error as e:
            raise UploadRefused("DATA_LOSS", f"block at {self.position}: {e}") from None
        if d.unconsumed_tail or not d.eof:
            raise UploadRefused("DATA_LOSS", f"block at {self.position} does not inflate to "
                                f"{raw_length} bytes")
        return raw

    def finish(self) -> None:
        """Verify, fsync and rename; raises UploadRefused when the file is incomplete or its
        checksum is wrong (the partial file is then removed)."""
        h = self.header
        fh = self._fh
        if fh is None:
            raise UploadRefused("INVALID_ARGUMENT", "the stream had no header")
        if self.position != h.file_size:
            self.close()
            raise UploadRefused("INVALID_ARGUMENT", f"{h.name}: the stream ended at "
                                f"{self.position} of {h.file_size} bytes (resume from there)")
        if self._crc != h.file_crc32c:
            self.discard()
            raise UploadRefused("DATA_LOSS", f"{h.name}: CRC-32C of the received file is "
                                f"{self._crc:#010x}, the header says {h.file_crc32c:#010x}; "
                                f"the partial file was removed, ship it again from 0")
        fh.flush()
        os.fsync(fh.fileno())  # a failure is an error of the stream: nothing is acknowledged
        self.close()
        os.rename(self.part_path, self.final_path)
        DEFAULT_FILE_IO.fsync_dir(self.directory)

    def close(self) -> None:
        if self._fh is not None:
            try:
                self._fh.flush()
                os.fsync(self._fh.fileno())  # what FileStatus reports must be on disk
            finally:
                self._fh.close()
                self._fh = None

    def discard(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        try:
            os.unlink(self.part_path)
        except FileNotFoundError:
            pass


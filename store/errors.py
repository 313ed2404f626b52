"""Typed errors of the store. Nothing in the store signals failure with -1 or None sizes."""
from __future__ import annotations


class StoreError(Exception):
    """Base class of every error raised by the store."""


class DiskError(StoreError):
    """A write, msync or fsync failed. The data it covered is not durable; the store turns
    not writable until a restart recovers it (never retried into success)."""

    def __init__(self, operation: str, path: str, cause: OSError) -> None:
        self.operation = operation
        self.path = path
        self.cause = cause
        super().__init__(f"{operation} failed on {path}: [errno {cause.errno}] {cause.strerror}")


class FlushTimeout(StoreError):
    """A requested flush did not complete within its timeout (no disk error: the flush is
    still running or waiting its turn)."""

    def __init__(self, target: int, flushed: int, timeout_s: float) -> None:
        super().__init__(f"the commitlog was flushed to {flushed}, not yet to {target}, "
                         f"after {timeout_s:g} s")
        self.target, self.flushed = target, flushed


class CreateFileError(StoreError):
    """A new mapped file could not be created or preallocated (full disk, read-only dir)."""

    def __init__(self, path: str, cause: OSError) -> None:
        self.path = path
        self.cause = cause
        super().__init__(f"cannot create {path}: [errno {cause.errno}] {cause.strerror}")


class NoRoomForFile(StoreError):
    """Creating the commitlog file a client put needs would take the room the store keeps for
    its own records (MessageStore.append); nothing was written."""


class MessageIllegal(StoreError):
    """A message fails validation; nothing was written. `field` names the offending part."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"illegal {field}: {reason}")


class PropertiesSizeExceeded(MessageIllegal):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__("properties", f"the encoded properties take {size} bytes, at most "
                                       f"maxPropertiesSize {limit}")


class StoreLocked(StoreError):
    """Another process holds the store's lock file."""


class CorruptFile(StoreError):
    """A store file has an impossible size or content."""


class OffsetOutOfRange(StoreError):
    """A physical or queue offset lies outside what the store holds."""

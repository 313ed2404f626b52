"""A node's archive shipper: a background service that ships the node's due commitlog files to
the archive (cluster/archive/ship_plan.py decides which and when) and tells retention how far
the archive has them (`released_up_to`, the store's `archived_up_to` hook).

One step ships at most one file:
1. FileStatus: held already (then its CRC-32C must be ours: else the archive holds another
   history and the file is let go with an error), or how many bytes of an interrupted upload
   it has (the stream resumes there: a restart of the node or the archive loses nothing and
   ships nothing twice);
2. the file's CRC-32C (read with pread, block by block);
3. ShipFile: the header, then each block from the resume point compressed alone with zlib
   (level 1: fast, and commitlog records compress well), with its own CRC-32C;
4. the ShipAck comes only once the archive fsynced the file: then it is HELD.
A refusal that will not change (FAILED_PRECONDITION, ALREADY_EXISTS) makes the file REFUSED:
logged once, and retention may delete it (the archive keeps a gap). Everything else
(UNAVAILABLE, ABORTED, DATA_LOSS, a timeout) is retried at the next step.

Retention waits for the archive only while this node ships (a slave, or any node with
archiveShipFrom=ANY); under disk pressure it deletes by diskPressurePolicy anyway and counts
what the archive did not get (store/retention/retention.py), so a dead archive cannot fill the disk.

Locking: `_lock` guards `verdicts` and `stats` (the retention thread reads them); the
shipping itself runs on this service's thread only.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

import grpc

from common.crc import crc32c
from proto import archive_pb2 as pb
from proto import archive_pb2_grpc as pb_grpc
from store import running_flags as rf
from common.clock import Clock
from store.layout import offset_file_name
from store.retention.retention import file_time_ms
from common.service import Service

from cluster.archive.ship_plan import (LocalFile, ShipRules, Verdict, held_up_to, next_to_ship,
                                       released_up_to)
from cluster.config.shipping_config import ShippingConfig
from cluster.archive.upload import file_crc32c
from cluster.security.member_proof import ARCHIVE_SHIP, MembershipRefused
from cluster.security.refusal_log import RefusalLog
from cluster.security.tls import TlsSettings, open_channel

if TYPE_CHECKING:
    from store.message_store import MessageStore

    from cluster.security.member_gate import MemberCredentials

log = logging.getLogger(__name__)

COMPRESSION_LEVEL = 1
CALL_TIMEOUT_S = 10.0
_FINAL = {grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS,
          grpc.StatusCode.INVALID_ARGUMENT}


@dataclass
class ShipStats:
    """What this shipper shipped since it started: files, raw and compressed bytes, time,
    resumed uploads and refusals (guarded by the shipper's lock)."""

    files: int = 0
    raw_bytes: int = 0  # bytes of the files shipped by this node (this run)
    sent_bytes: int = 0  # compressed bytes that crossed the wire
    seconds: float = 0.0  # time spent shipping (checksum + stream)
    resumed: int = 0  # files whose upload resumed after an interruption
    refused: int = 0

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.sent_bytes if self.sent_bytes else 0.0


class FileSource(Protocol):
    """The commitlog files a shipper ships from: a node's store, or (mixed mode) an archive's
    group (cluster/archive/archive_retention.py)."""

    clock: Clock

    def files(self) -> list[LocalFile]: ...
    def path(self, offset: int) -> str: ...
    def reserved_hours(self) -> int: ...
    def under_pressure(self) -> bool: ...


class StoreFiles:
    """A node's commitlog: sealed means a later file exists and (on a slave) the master
    confirmed all of it, so no failover can cut it any more."""

    def __init__(self, store: "MessageStore") -> None:
        self.store = store
        self.clock = store.clock

    def files(self) -> list[LocalFile]:
        files = self.store.commitlog_files()
        confirmed = self.store.confirm_offset
        return [LocalFile(f.file_from_offset, f.file_size, file_time_ms(f),
                          i < len(files) - 1 and (confirmed is None
                                                  or f.file_from_offset + f.file_size <= confirmed))
                for i, f in enumerate(files)]

    def path(self, offset: int) -> str:
        return os.path.join(self.store.commitlog_directory, offset_file_name(offset))

    def reserved_hours(self) -> int:
        return self.store.config.file_reserved_time

    def under_pressure(self) -> bool:
        return self.store.flags.has(rf.DISK_FULL)


class ArchiveShipper(Service):
    """Ships one source's due commitlog files to the archive, one per step (the module
    docstring): owns each file's verdict (HELD or REFUSED), the shipping `stats`, the
    operator's requested offset, and the gRPC channel to the archive.

    `_lock` guards `verdicts`, `stats` and the verdict count; `_verdict_added` (a Condition
    on it) wakes `wait_released`. Retention and the admin read through the hooks from their
    threads; the shipping runs on the service thread only. `requested_up_to` is set by
    `request` without the lock (one attribute, only raised)."""

    name = "archive-shipper"

    def __init__(self, source: FileSource, config: ShippingConfig, group: str, node_id: str,
                 ships_now: Callable[[], bool], credentials: "MemberCredentials",
                 tls: TlsSettings | None = None) -> None:
        super().__init__()
        self.source = source
        self.config = config
        self.group = group
        self.node_id = node_id
        self.ships_now = ships_now
        self.credentials = credentials
        self.clock = source.clock
        self.verdicts: dict[int, Verdict] = {}
        self.stats = ShipStats()
        self.requested_up_to = 0
        self._lock = threading.Lock()
        # notified (under _lock) whenever a file gets a verdict: wait_released sleeps on it
        self._verdict_added = threading.Condition(self._lock)
        self._verdict_count = 0
        self._channel = open_channel(config.address, tls)
        self._stub = pb_grpc.ArchiveStub(self._channel)
        self._log = RefusalLog(log, logging.WARNING, self.clock)

    # -- what retention asks ------------------------------------------------------------
    def released_up_to(self) -> int | None:
        """The store's archived_up_to hook: None while this node does not ship (retention
        does not wait), else the offset below which the archive answered for every file."""
        if not self.ships_now():
            return None
        with self._lock:
            verdicts = dict(self.verdicts)
        return released_up_to(self.source.files(), verdicts)

    def held_up_to(self) -> int | None:
        """The store's archive_held_up_to hook: None while this node does not ship, else the
        offset below which the archive holds every file (a refused file ends the run: the
        archive has no copy of it)."""
        if not self.ships_now():
            return None
        with self._lock:
            verdicts = dict(self.verdicts)
        return held_up_to(self.source.files(), verdicts)

    def wait_released(self, up_to: int, timeout_s: float) -> int:
        """Block until released_up_to() reaches `up_to` or `timeout_s` passed; returns it (0
        while this node does not ship). Woken by each verdict, and every second regardless
        (retention may remove a file meanwhile, which also moves the answer)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                seen = self._verdict_count
            released = self.released_up_to() or 0
            remaining = deadline - time.monotonic()
            if released >= up_to or remaining <= 0:
                return released
            with self._verdict_added:
                self._verdict_added.wait_for(lambda: self._verdict_count != seen,
                                             min(remaining, 1.0))

    def request(self, up_to: int) -> None:
        """Ship every sealed file below `up_to` now (an operator's request)."""
        self.requested_up_to = max(self.requested_up_to, up_to)
        self.wakeup()

    # -- the service --------------------------------------------------------------------
    def wait_interval(self) -> float:
        return self.config.interval_ms / 1000.0

    def step(self) -> LocalFile | None:
        """Ship the next due file, if any; returns it when it now has a verdict."""
        if not self.ships_now():
            return None
        with self._lock:
            verdicts = dict(self.verdicts)
        rules = ShipRules(self.source.reserved_hours(), self.config.ahead_hours,
                          self.config.ship_all)
        f = next_to_ship(self.source.files(), verdicts, self.clock.now_ms(), rules,
                         self.source.under_pressure(), self.requested_up_to)
        if f is None:
            return None
        try:
            verdict = self._ship(f)
        except (grpc.RpcError, MembershipRefused, OSError) as e:
            self._log.refused("ShipFile", self.config.address, f"shipping "
                              f"{self._name(f)} failed, retried: {_describe(e)}")
            return None
        with self._lock:
            self.verdicts[f.offset] = verdict
            self._verdict_count += 1
            self._verdict_added.notify_all()
        return f

    def on_stop(self) -> None:
        self._channel.close()

    # -- shipping one file --------------------------------------------------------------
    def _name(self, f: LocalFile) -> str:
        return f"{self.group}/{offset_file_name(f.offset)}"

    def _metadata(self) -> list[tuple[str, str]]:
        return self.credentials.metadata(self._channel, ARCHIVE_SHIP, CALL_TIMEOUT_S)

    def _ship(self, f: LocalFile) -> Verdict:
        path = self.source.path(f.offset)
        started = time.monotonic()
        crc = file_crc32c(path, f.size, self.config.block_bytes)
        status = self._stub.FileStatus(pb.FileStatusRequest(broker_group=self.group,
                                                            file_offset=f.offset),
                                       metadata=self._metadata(), timeout=CALL_TIMEOUT_S)
        if status.held:
            if status.file_crc32c != crc:
                return self._refused(f, f"the archive holds another file at this offset "
                                        f"(CRC-32C {status.file_crc32c:#010x}, ours {crc:#010x})")
            log.info("archive: %s is held already", self._name(f))
            return Verdict.HELD
        if status.newest_offset > f.offset:
            return self._refused(f, f"the archive's newest file is {status.newest_offset}: it "
                                    f"does not take older files")
        resume = status.partial_bytes if 0 < status.partial_bytes < f.size else 0
        header = pb.ShipHeader(broker_group=self.group, file_offset=f.offset, file_size=f.size,
                               resume_from=resume, file_crc32c=crc, codec="zlib",
                               source_node=self.node_id)
        sent = [0]
        try:
            ack = self._stub.ShipFile(self._chunks(path, header, sent), metadata=self._metadata(),
                                      timeout=max(60.0, f.size / (5 << 20)))
        except grpc.RpcError as e:
            if e.code() in _FINAL:
                return self._refused(f, f"{e.code().name}: {e.details()}")
            raise
        seconds = time.monotonic() - started
        with self._lock:
            s = self.stats
            s.files += 1
            s.raw_bytes += f.size - resume
            s.sent_bytes += sent[0]
            s.seconds += seconds
            s.resumed += bool(resume)
        log.info("archive: shipped %s (%s, %d bytes as %d, %.1f MB/s%s)", self._name(f),
                 ack.status, f.size - resume, sent[0],
                 (f.size - resume) / max(seconds, 1e-6) / 1e6,
                 f", resumed at {resume}" if resume else "")
        return Verdict.HELD

    def _refused(self, f: LocalFile, why: str) -> Verdict:
        log.error("archive: %s is refused by the archive and let go (retention may delete "
                  "it): %s", self._name(f), why)
        with self._lock:
            self.stats.refused += 1
        return Verdict.REFUSED

    def _chunks(self, path: str, header: pb.ShipHeader, sent: list[int]) -> Iterator[pb.ShipChunk]:
        yield pb.ShipChunk(header=header)
        block = self.config.block_bytes
        fd = os.open(path, os.O_RDONLY)
        try:
            pos = header.resume_from
            while pos < header.file_size:
                raw = os.pread(fd, min(block, header.file_size - pos), pos)
                if not raw:
                    raise OSError(f"{path} ends at {pos}, before {header.file_size}")
                data = zlib.compress(raw, COMPRESSION_LEVEL)
                sent[0] += len(data)
                yield pb.ShipChunk(block=pb.ShipBlock(data=data, raw_length=len(raw),
                                                      raw_crc32c=crc32c(raw)))
                pos += len(raw)
        finally:
            os.close(fd)


def _describe(e: BaseException) -> str:
    if isinstance(e, grpc.RpcError):
        return f"{e.code().name}: {e.details()}"
    return f"{type(e).__name__}: {e}"

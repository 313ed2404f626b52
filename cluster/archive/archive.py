"""The archive server's state without gRPC: its broker groups, receiving a shipped file, file
status, holdings and the queries across groups.

Receiving rules (proto/archive.proto says them to clients):
- one upload per group at a time (ABORTED for a second one: the shipper retries later), so a
  group's files are dispatched in offset order;
- a file the group holds already is acknowledged as ALREADY_HELD when its checksum is the
  same, and refused (ALREADY_EXISTS) when it differs: two different files at one offset mean
  two different histories, an operator must look;
- a file below the group's newest one that it does not hold is refused (FAILED_PRECONDITION):
  its records would have to go into the queues before records already there;
- a slow upload gives way (issue 49: a slow peer must not hold the others back): each slave
  of a group ships the same files, and the one whose upload holds the group's slot would
  otherwise set the pace for all (and hold back the retention of every node waiting for the
  file). While another node was refused the slot within WAITING_S, an upload that has run
  GIVE_WAY_AFTER_S and stored less than GIVE_WAY_BYTES_PER_S on average ends at its next
  block with ABORTED; its partial file stays, and the waiting node resumes from it (FileStatus).

Locking: `_lock` guards the dict of groups and the uploads in progress (`_receiving`).
"""
from __future__ import annotations

import logging
import os
import threading
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from proto import admin_pb2 as admin_pb
from common.clock import Clock
from common.service import Service

from cluster.admin.message_lookup import lookup
from cluster.archive.archive_group import ArchiveGroup, group_names
from cluster.client.connection import ClientConfig
from cluster.archive.upload import (FileUpload, UploadHeader, UploadRefused, check_group_name,
                                    partial_bytes)

log = logging.getLogger(__name__)

STORED, ALREADY_HELD = "STORED", "ALREADY_HELD"
GIVE_WAY_AFTER_S = 10.0            # an upload is judged once it ran this long,
GIVE_WAY_BYTES_PER_S = 1 << 20     # and gives way under this average (raw bytes stored)
WAITING_S = 30.0                   # while a node refused the slot this recently waits


class _Receiving:
    """One group's upload in progress (guarded by Archive._lock): who sends it, since when,
    how much it stored, and who was last refused the slot meanwhile."""

    __slots__ = ("source", "started", "stored", "waiting", "waiting_at")

    def __init__(self, source: str, started: float) -> None:
        self.source = source
        self.started = started
        self.stored = 0
        self.waiting = ""
        self.waiting_at: float | None = None


@dataclass(frozen=True)
class UploadResult:
    """A ShipFile's answer: STORED or ALREADY_HELD, the file, and the bytes stored and
    received (compressed)."""

    status: str
    file_offset: int
    stored_bytes: int = 0
    received_bytes: int = 0


Block = tuple[bytes, int, int]  # (data, raw length, raw CRC-32C)


class Archive:
    """The archive server's state (the module docstring): owns its broker groups (an
    ArchiveGroup each, loaded or created on first use), the set of groups receiving a file,
    its id (archive.id) and the background Indexer.

    `_lock` guards `groups` and `_receiving` (group -> its upload in progress). A file's
    upload runs outside it (one per group at a time, by `_receiving`); each group locks its
    own files."""

    def __init__(self, root: str, clock: Clock) -> None:
        self.root = os.path.abspath(root)
        self.clock = clock
        self.groups: dict[str, ArchiveGroup] = {}
        self._receiving: dict[str, _Receiving] = {}
        self._lock = threading.Lock()
        self.archive_id = self._load_id()
        self.indexer = Indexer(self)
        # How Reconsume reaches a live cluster: its signing keys and TLS
        # (cluster/assembly/archive_process.py)
        self.cluster_client: Callable[[str], ClientConfig] = ClientConfig

    def _load_id(self) -> str:
        os.makedirs(self.root, exist_ok=True)
        path = os.path.join(self.root, "archive.id")
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except FileNotFoundError:
            ident = uuid.uuid4().hex[:12]
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(ident + "\n")
            return ident

    def load(self) -> None:
        for name in group_names(self.root):
            self.group(name)

    def group(self, name: str, create: bool = True) -> ArchiveGroup | None:
        with self._lock:
            g = self.groups.get(name)
            if g is None and (create or os.path.isdir(os.path.join(self.root, name))):
                g = ArchiveGroup(self.root, check_group_name(name), self.clock)
                g.load()
                self.groups[name] = g
            return g

    def index_all(self) -> int:
        """Index every stored file not indexed yet (the indexer's step); how many."""
        count = 0
        for g in self.selected(""):
            while g.index_next() is not None:
                count += 1
        return count

    def close(self) -> None:
        self.indexer.stop()
        with self._lock:
            for g in self.groups.values():
                g.close()
            self.groups.clear()

    # -- receiving ----------------------------------------------------------------------
    def receive(self, header: UploadHeader, blocks: Iterable[Block]) -> UploadResult:
        """One ShipFile stream: stores the file (see the module rules) and answers only once it
        is on disk, dispatched and in the catalog. Raises UploadRefused."""
        group = header.broker_group
        with self._lock:
            now = self.clock.monotonic()
            current = self._receiving.get(group)
            if current is not None:
                current.waiting, current.waiting_at = header.source_node or "?", now
                raise UploadRefused("ABORTED", f"group {group} is receiving another file "
                                    f"from {current.source or '?'}; try again")
            receiving = self._receiving[group] = _Receiving(header.source_node, now)
        try:
            return self._receive(header, self._paced(receiving, header, blocks))
        finally:
            with self._lock:
                self._receiving.pop(group, None)

    def _paced(self, receiving: _Receiving, header: UploadHeader,
               blocks: Iterable[Block]) -> Iterator[Block]:
        """The blocks of an upload, counted; ends it with ABORTED when it has to give way (the
        module docstring) before taking the next one."""
        for block in blocks:
            with self._lock:
                now = self.clock.monotonic()
                ran = now - receiving.started
                rate = receiving.stored / ran if ran > 0 else 0.0
                waiting = receiving.waiting_at is not None and now - receiving.waiting_at \
                    <= WAITING_S
                if waiting and ran >= GIVE_WAY_AFTER_S and rate < GIVE_WAY_BYTES_PER_S:
                    raise UploadRefused(
                        "ABORTED", f"{header.broker_group}/{header.name} from "
                        f"{receiving.source or '?'} gives way to {receiving.waiting}: "
                        f"{rate / (1 << 20):.2f} MiB/s in {ran:.0f} s is under "
                        f"{GIVE_WAY_BYTES_PER_S / (1 << 20):.0f} MiB/s; the partial file stays "
                        f"for a resume")
                receiving.stored += block[1]
            yield block

    def _receive(self, header: UploadHeader, blocks: Iterable[Block]) -> UploadResult:
        g = self.group(header.broker_group)
        held = g.entry(header.file_offset)
        if held is not None:
            if held.crc32c != header.file_crc32c:
                raise UploadRefused("ALREADY_EXISTS", f"{header.broker_group}/{header.name} is "
                                    f"held with CRC-32C {held.crc32c:#010x}, this one has "
                                    f"{header.file_crc32c:#010x}")
            return UploadResult(ALREADY_HELD, header.file_offset)
        if header.file_offset < g.newest_offset:
            raise UploadRefused("FAILED_PRECONDITION", f"{header.broker_group}/{header.name} is "
                                f"older than the newest file held ({g.newest_offset}); a gap "
                                f"before it stays a gap")
        if g.entries and g.entries[0].size != header.file_size:
            raise UploadRefused("INVALID_ARGUMENT", f"file_size {header.file_size} differs from "
                                f"the group's files ({g.entries[0].size})")
        upload = FileUpload(g.paths.commitlog_dir, header)
        upload.begin()
        try:
            for data, raw_length, raw_crc in blocks:
                upload.block(data, raw_length, raw_crc)
        except BaseException:
            upload.close()  # keep what came for a resume; its checksum decides at the end
            raise
        upload.finish()
        g.stored(header.file_offset, header.file_size, header.file_crc32c)
        self.indexer.wakeup()
        log.info("archive: stored %s/%s from %s (%d bytes in %d compressed)",
                 header.broker_group, header.name, header.source_node or "?", upload.stored,
                 upload.received)
        return UploadResult(STORED, header.file_offset, upload.stored, upload.received)

    def file_status(self, group: str, file_offset: int) -> tuple[bool, int, int, int]:
        """(held, partial bytes, CRC-32C of the held file, the group's newest offset)."""
        g = self.group(check_group_name(group), create=False)
        if g is None:
            return False, 0, 0, -1
        held = g.entry(file_offset)
        if held is not None:
            return True, 0, held.crc32c, g.newest_offset
        return False, partial_bytes(g.paths.commitlog_dir, file_offset), 0, g.newest_offset

    # -- reading ------------------------------------------------------------------------
    def selected(self, group: str) -> list[ArchiveGroup]:
        if group:
            g = self.group(check_group_name(group), create=False)
            return [g] if g is not None else []
        with self._lock:
            return list(self.groups.values())

    def query(self, group: str, req: admin_pb.QueryMessagesRequest) -> admin_pb.GetMessagesResponse:
        """The Admin API's lookups over each selected group; the answers merged by store time
        (newest first for keys, as a node answers), at most the request's limit."""
        found, truncated = self.query_groups(group, req)
        out = admin_pb.GetMessagesResponse(status="FOUND" if found else "NO_MATCHED_MESSAGE",
                                           truncated=truncated)
        out.messages.extend(m for _, m in found)
        return out

    def query_groups(self, group: str, req: admin_pb.QueryMessagesRequest
                     ) -> tuple[list[tuple[str, admin_pb.Message]], bool]:
        """(group, message) of each answer, and whether more matched than the limit."""
        found: list[tuple[str, admin_pb.Message]] = []
        truncated = False
        for g in self.selected(group):
            r = lookup(g, req, g.topics)
            found += [(g.name, m) for m in r.messages]
            truncated |= r.truncated
        found.sort(key=lambda gm: (gm[1].store_timestamp, gm[1].commit_log_offset),
                   reverse=bool(req.key))
        limit = req.max_count or 32
        return found[:limit], truncated or len(found) > limit

    def holdings(self, group: str = "") -> Iterator[ArchiveGroup]:
        yield from sorted(self.selected(group), key=lambda g: g.name)


class Indexer(Service):
    """Indexes stored files in the background, so a file is acknowledged once it is on disk and
    the next one streams in while this one is dispatched."""

    name = "archive-indexer"

    def __init__(self, archive: Archive) -> None:
        super().__init__()
        self.archive = archive

    def step(self) -> None:
        self.archive.index_all()

    def wait_interval(self) -> float:
        return 1.0

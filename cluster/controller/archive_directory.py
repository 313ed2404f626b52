"""The archives a controller has heard of: each commitlog archive announces its address and
the store-time range it holds per broker group (cluster/assembly/archive_process.py) every
retention round; `history` asks the controller which archives may hold an answer.

Kept in memory only: an archive re-announces itself every few seconds, so a restarted or
standby controller knows every live archive again within one round, and one that stopped
announcing is forgotten after `ttl_s`. Locking: `_lock` guards the table (handler threads).
"""
from __future__ import annotations

import threading

from proto import controller_pb2 as pb

TTL_S = 60.0


class ArchiveDirectory:
    """The archives announced to this controller (the module docstring): owns the table of
    archive id -> (last announcement, when), pruned after `ttl_s`. `_lock` guards it."""

    def __init__(self, ttl_s: float = TTL_S) -> None:
        self.ttl_s = ttl_s
        self._table: dict[str, tuple[pb.ArchiveAnnouncement, float]] = {}
        self._lock = threading.Lock()

    def announce(self, a: pb.ArchiveAnnouncement, now: float) -> None:
        if not a.archive_id or not a.address:
            raise ValueError("an announcement needs archive_id and address")
        for g in a.groups:
            if not g.broker_group or g.first_store_timestamp > g.last_store_timestamp:
                raise ValueError(f"bad range for group {g.broker_group!r}: "
                                 f"{g.first_store_timestamp}..{g.last_store_timestamp}")
        with self._lock:
            self._table[a.archive_id] = (a, now)

    def archives(self, now: float) -> list[pb.ArchiveAnnouncement]:
        with self._lock:
            for ident in [i for i, (_, at) in self._table.items() if now - at > self.ttl_s]:
                del self._table[ident]
            return [a for _, (a, _) in sorted(self._table.items())]

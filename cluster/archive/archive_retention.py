"""The archive's own retention, with RocketMQ's rules, and mixed mode (chained archives).

One `step()` per cleanResourceInterval:
- the used ratio of the file system under the archive's root is read; at or above
  diskMaxUsedSpaceRatio the archive is under pressure;
- for each group, oldest file first: a file whose last message is older than fileReservedTime
  hours is expired; it is deleted during the deleteWhen hours, and under pressure any oldest
  file is deleted (expired or not) until the ratio is below the limit again;
- mixed mode (forwardAddress): each group has a forwarder, the node's shipper over the
  group's files (`GroupFiles`), which sends a file on to the next archive forwardAheadHours
  before it expires (under pressure at once). Retention waits for the next archive's ack
  before deleting a file; under pressure it deletes anyway, logs it and counts it
  (`unforwarded_deleted`), so a dead next archive cannot fill this one's disk.
Each step also writes this archive's time ranges to the registry (cluster/archive/registry.py).
"""
from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Callable

from common.clock import Clock
from store.layout import offset_file_name
from store.retention.retention import DiskUsage, default_disk_usage
from common.service import Service

from cluster.archive.archive_group import ArchiveGroup
from cluster.archive.ship_plan import LocalFile
from cluster.archive.shipper import ArchiveShipper
from cluster.config.shipping_config import ShippingConfig

if TYPE_CHECKING:
    from cluster.archive.archive import Archive
    from cluster.archive.archive_config import ArchiveConfig
    from cluster.security.member_gate import MemberCredentials

log = logging.getLogger(__name__)

_HOUR_MS = 3600 * 1000


def file_time_ms(e) -> int:
    """A held file's age counts from its last message (its archiving time when it has none)."""
    return e.last_store_timestamp or e.archived_at_ms


class GroupFiles:
    """An archived group's files as a shipper's FileSource (mixed mode): every held file is
    sealed."""

    def __init__(self, group: ArchiveGroup, reserved_hours: int,
                 pressure: Callable[[], bool]) -> None:
        self.group = group
        self.clock = group.clock
        self._reserved_hours = reserved_hours
        self._pressure = pressure

    def files(self) -> list[LocalFile]:
        return [LocalFile(e.offset, e.size, file_time_ms(e), True) for e in self.group.entries]

    def path(self, offset: int) -> str:
        return os.path.join(self.group.paths.commitlog_dir, offset_file_name(offset))

    def reserved_hours(self) -> int:
        return self._reserved_hours

    def under_pressure(self) -> bool:
        return self._pressure()


class ArchiveRetention(Service):
    """The archive's retention service (the module docstring): owns the pressure flag, the
    deletion counters and, in mixed mode, one forwarder (an ArchiveShipper over the group's
    files) per group, started with it and stopped with it.

    No lock of its own: `forwarders`, `pressure` and the counters are written by the service
    thread (`step`); the forwarders read `pressure` from their threads as one attribute and
    do their own locking. Deleting a file takes its group's lock (ArchiveGroup)."""

    name = "archive-retention"

    def __init__(self, archive: "Archive", config: "ArchiveConfig", clock: Clock,
                 credentials: "MemberCredentials",
                 disk_usage: DiskUsage = default_disk_usage,
                 announce: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.archive = archive
        self.config = config
        self.clock = clock
        self.credentials = credentials
        self.disk_usage = disk_usage
        self.announce = announce
        self.forwarders: dict[str, ArchiveShipper] = {}
        self.pressure = False
        self.deleted = 0
        self.unforwarded_deleted = 0

    def wait_interval(self) -> float:
        return self.config.clean_resource_interval / 1000.0

    def forwarder(self, group: ArchiveGroup) -> ArchiveShipper | None:
        """The group's forwarder in mixed mode (created and started on first use)."""
        c = self.config
        if not c.forward_address:
            return None
        f = self.forwarders.get(group.name)
        if f is None:
            shipping = ShippingConfig(address=c.forward_address, ship_from="ANY",
                                      ahead_hours=c.forward_ahead_hours,
                                      interval_ms=min(5000, c.clean_resource_interval))
            f = ArchiveShipper(GroupFiles(group, c.file_reserved_time, lambda: self.pressure),
                               shipping, group.name, self.credentials.node_id, lambda: True,
                               self.credentials, c.tls)
            self.forwarders[group.name] = f
            if self.running:
                f.start()
        return f

    def step(self) -> int:
        """One round; returns how many files it deleted."""
        c = self.config
        try:
            self.pressure = self.disk_usage(self.archive.root) * 100 >= c.disk_max_used_space_ratio
        except OSError:
            log.warning("archive retention: cannot read disk usage of %s", self.archive.root,
                        exc_info=True)
        now = self.clock.now_ms()
        delete_hour = time.localtime(now / 1000.0).tm_hour in c.delete_hours()
        reserved_ms = c.file_reserved_time * _HOUR_MS
        deleted = 0
        for g in list(self.archive.holdings()):
            fwd = self.forwarder(g)
            while g.entries and g.entries[0].indexed:  # never a file reput has not read
                e = g.entries[0]
                expired = delete_hour and file_time_ms(e) + reserved_ms <= now
                if not (expired or self.pressure):
                    break
                released = fwd.released_up_to() if fwd is not None else None
                if released is not None and released < e.end:
                    if not self.pressure:
                        break  # wait until the next archive has it
                    self.unforwarded_deleted += 1
                    log.warning("archive retention: disk pressure deletes %s/%d before the next "
                                "archive has it", g.name, e.offset)
                g.delete_oldest()
                deleted += 1
                log.info("archive retention: deleted %s/%020d (%s)", g.name, e.offset,
                         "disk pressure" if self.pressure and not expired else "expired")
                if self.pressure:
                    self.pressure = (self.disk_usage(self.archive.root) * 100
                                     >= c.disk_max_used_space_ratio)
        self.deleted += deleted
        if self.announce is not None:
            self.announce()
        return deleted

    def start(self) -> None:
        super().start()
        for f in self.forwarders.values():
            f.start()

    def on_stop(self) -> None:
        for f in self.forwarders.values():
            f.stop()

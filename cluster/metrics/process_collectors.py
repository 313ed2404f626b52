"""The controller's and the archive server's metrics, read when Prometheus scrapes.

Controller (`rmqstore_controller_` prefix):
    active (0/1: this controller answers as the active one)
    group_epoch{group}, group_sync_state_set_size{group}, group_has_master{group}
    group_elections{group}             elections the group's record keeps (the last ones)
    group_sync_state_epoch{group}      +1 per change of the sync state set (increase() counts
                                       them; the reasons are in `status` and the log)
    node_heartbeat_age_seconds{group,node}, node_healthy{group,node}
    group_routed_writable{group}       1 while the route gives the group's queues PERM_WRITE (it
                                       has a serving master), 0 while producers skip the group
    group_routed_topics{group}         topics its master registered with this controller
    archives_announced                 archives that announced themselves within 60 s
Archive (`rmqstore_archive_` prefix):
    files{group}, bytes{group}, messages{group}, unindexed_files{group}
    first_store_timestamp_seconds{group}, last_store_timestamp_seconds{group}
    retention_deleted_files_total, retention_unforwarded_deleted_total
    forwarded_files_total{group}, forwarded_bytes_total{group}     (mixed mode)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from cluster.controller.active_gate import NotActiveController

if TYPE_CHECKING:
    from cluster.assembly.archive_process import ArchiveProcess
    from cluster.assembly.controller_process import ControllerProcess

C = "rmqstore_controller_"
A = "rmqstore_archive_"


def family(kind, name: str, doc: str, labels: list[str], rows) -> Metric:
    f = kind(name, doc, labels=labels)
    for key, value in rows:
        f.add_metric(list(key), value)
    return f


class ControllerCollector:
    """The controller's metrics (the module docstring), read from its process at each scrape
    on the HTTP endpoint's thread; holds nothing but the process and takes no lock (the
    service's snapshot and the archive directory lock their own state)."""

    def __init__(self, process: "ControllerProcess") -> None:
        self.process = process

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Metric]:
        p = self.process
        try:
            groups = p.service.snapshots() if p.service is not None else []
            routed = p.service.cluster_route().groups if p.service is not None else ()
            active = 1
        except NotActiveController:
            groups, routed, active = [], (), 0
        yield family(GaugeMetricFamily, C + "active", "1 while this controller is the active "
                     "one", [], [((), active)])
        g_labels = ["group"]
        yield family(GaugeMetricFamily, C + "group_epoch", "The group's epoch", g_labels,
                     [((g.record.broker_name,), g.record.epoch) for g in groups])
        yield family(GaugeMetricFamily, C + "group_sync_state_set_size",
                     "Members of the group's sync state set", g_labels,
                     [((g.record.broker_name,), len(g.record.sync_state_set)) for g in groups])
        yield family(GaugeMetricFamily, C + "group_has_master", "1 while the group has a "
                     "master", g_labels,
                     [((g.record.broker_name,), 1 if g.record.master_id else 0) for g in groups])
        yield family(GaugeMetricFamily, C + "group_elections", "Elections the group's record "
                     "keeps", g_labels,
                     [((g.record.broker_name,), len(g.record.elections)) for g in groups])
        yield family(GaugeMetricFamily, C + "group_sync_state_epoch", "The sync state set's "
                     "epoch: one more per change", g_labels,
                     [((g.record.broker_name,), g.record.sync_state_epoch) for g in groups])
        yield family(GaugeMetricFamily, C + "group_routed_writable", "1 while the route gives "
                     "the group's queues write permission (it has a serving master)", g_labels,
                     [((r.broker_name,), 1 if r.has_master else 0) for r in routed])
        yield family(GaugeMetricFamily, C + "group_routed_topics", "Topics the group's master "
                     "registered with this controller", g_labels,
                     [((r.broker_name,), len(r.topics)) for r in routed])
        n_labels = ["group", "node"]
        reports = [((g.record.broker_name, node), r) for g in groups
                   for node, r in sorted(g.reports.items())]
        yield family(GaugeMetricFamily, C + "node_heartbeat_age_seconds", "Seconds since the "
                     "node's last heartbeat", n_labels, [(k, age) for k, (_, age) in reports])
        yield family(GaugeMetricFamily, C + "node_healthy", "1 while the node reports healthy",
                     n_labels, [(k, 1 if r.healthy else 0) for k, (r, _) in reports])
        servicer = p.servicer
        announced = len(servicer.archives.archives(p.clock.monotonic())) if servicer else 0
        yield family(GaugeMetricFamily, C + "archives_announced", "Archives announced within "
                     "60 s", [], [((), announced)])


class ArchiveCollector:
    """The archive server's metrics (the module docstring), read from its Archive and
    retention at each scrape on the HTTP endpoint's thread; holds nothing but the process
    and reads the groups' entry lists and the counters without a lock."""

    def __init__(self, process: "ArchiveProcess") -> None:
        self.process = process

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Metric]:
        p = self.process
        groups = list(p.archive.holdings())
        labels = ["group"]

        def per_group(name: str, doc: str, value) -> Metric:
            return family(GaugeMetricFamily, A + name, doc, labels,
                          [((g.name,), value(g)) for g in groups])
        yield per_group("files", "Commitlog files held", lambda g: len(g.entries))
        yield per_group("bytes", "Bytes of the files held", lambda g: sum(e.size for e in g.entries))
        yield per_group("messages", "Records of the indexed files", lambda g: sum(
            e.records for e in g.entries))
        yield per_group("unindexed_files", "Files stored but not indexed yet",
                        lambda g: sum(not e.indexed for e in g.entries))
        yield per_group("first_store_timestamp_seconds", "Store time of the oldest message held",
                        lambda g: g.time_range()[0] / 1000.0)
        yield per_group("last_store_timestamp_seconds", "Store time of the newest message held",
                        lambda g: g.time_range()[1] / 1000.0)
        r = p.retention
        yield family(CounterMetricFamily, A + "retention_deleted_files", "Files the archive's "
                     "retention deleted", [], [((), r.deleted)])
        yield family(CounterMetricFamily, A + "retention_unforwarded_deleted", "Files disk "
                     "pressure deleted before the next archive had them", [],
                     [((), r.unforwarded_deleted)])
        fwd = sorted(r.forwarders.items())
        yield family(CounterMetricFamily, A + "forwarded_files", "Files forwarded to the next "
                     "archive", labels, [((g,), f.stats.files) for g, f in fwd])
        yield family(CounterMetricFamily, A + "forwarded_bytes", "File bytes forwarded", labels,
                     [((g,), f.stats.raw_bytes) for g, f in fwd])

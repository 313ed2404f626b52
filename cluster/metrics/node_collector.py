"""A node's metrics, read when Prometheus scrapes: the node's status (the same figures as
`python -m cluster status`), the store's counters, disk usage, consumer lag per queue (on the
master, which keeps the consumer state), retention's and the archive shipper's counters.

Names (all prefixed `rmqstore_`; offsets are commitlog byte offsets):

    node_info{node_id,cluster,broker_name}        1
    role{role}                                     1 for the current role, 0 for the others
    epoch, writable (0/1)
    commitlog_min_offset, commitlog_max_offset, flushed_offset, confirm_offset,
    dispatched_offset, reput_backlog_bytes         gauges
    slave_ack_offset{slave}, slave_lag_bytes{slave}, slave_lag_seconds{slave},
    slave_in_sync{slave}                           master only
    slave_ack_latency_seconds{slave}, slave_ack_latency_p99_seconds{slave},
    slave_ack_pending_seconds{slave}               master only: how long puts wait for each
                                                   slave's ack (ha/ack_latency.py; the median
                                                   is what the slow rule judges)
    slave_held_out{slave}                          1 while held out of the in-sync set as slow
    slave_in_sync_changes_total{slave}             leaves and joins this master term
    slave_last_in_sync_change{slave,change,cause}  1: the last change (left/joined) and why
                                                   (slow, lagging, not_caught_up, disconnected,
                                                   new_session, caught_up, fast_again)
    slave_released_puts_total{slave}, slave_released_wait_seconds_total{slave}   puts whose
                                                   wait this slave's ack ended, and their waits
    in_sync_replicas, sync_state_set_size          master only
    disk_used_ratio{path}                          the commitlog's and the store root's file system
    put_messages_total, put_bytes_total, put_failures_total, get_messages_total   counters
    index_process_restarts_total                   with messageIndexProcessEnable (a node's
                                                   default): index processes started again
    receive_conversion_starts_total, receive_conversion_fallbacks_total   with
                                                   receiveConversionProcessEnable (default):
                                                   conversion processes started, receives
                                                   built in the node instead
    consumer_lag_messages{group,topic,queue}, consumer_inflight_messages{group,topic,queue}
    retention_deleted_files_total, retention_unarchived_deleted_files_total,
    retention_unconsumed_deleted_total{group}
    archive_shipped_files_total, archive_shipped_bytes_total, archive_sent_bytes_total,
    archive_refused_files_total                    with archiveAddress
    grpc_calls_total{method,code}                  every call the node's server answered
    duplicate_window_entries, duplicate_window_seconds, duplicate_window_effective_seconds
                                                   gauges: message ids held; the configured
                                                   window; how far back every id is still
                                                   held (shorter once the bound evicted)
    duplicate_window_hits_total, duplicate_window_refusals_total,
    duplicate_window_evictions_total               counters: sends answered with their
                                                   original's receipt; ids reused for another
                                                   message, refused; entries the bound evicted
    put_latency_seconds{status}                    histogram: puts on this node as master
    flush_latency_seconds, flush_failed            histogram of commitlog flushes; 1 after a
                                                   failed flush
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, Metric)

from store.broker_role import BrokerRole
from store.retention.retention import default_disk_usage

if TYPE_CHECKING:
    from cluster.assembly.node import Node

log = logging.getLogger(__name__)
P = "rmqstore_"
ROLES = [r.value for r in BrokerRole] + ["TRANSITIONING"]


def gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> Metric:
    g = GaugeMetricFamily(P + name, doc, labels=list(labels or {}))
    g.add_metric(list((labels or {}).values()), value)
    return g


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def counter(name: str, doc: str, value: float) -> Metric:
    c = CounterMetricFamily(P + name, doc)
    c.add_metric([], value)
    return c


class NodeCollector:
    """Reads the node at each scrape; never blocks on the write path (status() and the
    counters are plain reads)."""

    def __init__(self, node: "Node") -> None:
        self.node = node

    def describe(self) -> list:
        return []  # the families depend on the role: collected, not declared

    def collect(self) -> Iterator[Metric]:
        node = self.node
        s = node.status()
        c = node.config
        yield gauge("node_info", "This node's identity", 1,
                    {"node_id": s.node_id, "cluster": c.cluster_name,
                     "broker_name": c.broker_name})
        role = GaugeMetricFamily(P + "role", "1 for the node's current role", labels=["role"])
        for r in ROLES:
            role.add_metric([r], 1 if s.role == r else 0)
        yield role
        yield gauge("epoch", "Last epoch in the node's epoch file", s.epoch)
        yield gauge("writable", "1 while the store accepts writes", 1 if s.writable else 0)
        for name, value in (("commitlog_min_offset", s.min_offset),
                            ("commitlog_max_offset", s.max_offset),
                            ("flushed_offset", s.flushed_offset),
                            ("confirm_offset", s.confirm_offset),
                            ("dispatched_offset", s.dispatched_offset)):
            yield gauge(name, f"Commitlog {name.replace('_', ' ')} (bytes)", value)
        yield gauge("reput_backlog_bytes", "Commitlog bytes reput has not dispatched yet",
                    max(0, s.max_offset - s.dispatched_offset))
        yield from self._replication(s)
        yield from self._disk()
        stats = node.store.stats
        yield counter("put_messages", "Messages appended", stats.put_messages)
        yield counter("put_bytes", "Bytes appended", stats.put_bytes)
        yield counter("put_failures", "Appends refused or failed", stats.put_failures)
        yield counter("get_messages", "Messages read", stats.get_messages)
        yield from self._duplicate_window()
        restarts = node.store.index_process_restarts
        if restarts is not None:
            yield counter("index_process_restarts", "Index processes started again after "
                          "the last one died (messageIndexProcessEnable)", restarts)
        messaging = node.messaging
        conversion = messaging.consumer_router.calls.answers.conversion if messaging else None
        if conversion is not None:
            yield counter("receive_conversion_starts", "Conversion processes started "
                          "(receiveConversionProcessEnable)", conversion.starts)
            yield counter("receive_conversion_fallbacks", "Receives whose messages were "
                          "built in the node because the conversion process could not serve "
                          "them", conversion.fallbacks)
        yield from self._consumers(s)
        yield from self._retention()
        yield from self._archive()
        yield from self._latencies()
        calls = CounterMetricFamily(P + "grpc_calls", "gRPC calls answered, by method and "
                                    "status code", labels=["method", "code"])
        for (method, code), n in sorted(node.calls.snapshot().items()):
            calls.add_metric([method, code], n)
        yield calls

    def _duplicate_window(self) -> Iterator[Metric]:
        w = self.node.store.duplicate_window_stats()
        yield gauge("duplicate_window_entries", "Message ids held by the duplicate window",
                    w.entries)
        yield gauge("duplicate_window_seconds", "The duplicate window as configured "
                    "(duplicateWindowSeconds; 0: off)", w.window_ms / 1000.0)
        yield gauge("duplicate_window_effective_seconds", "How far back the duplicate window "
                    "holds every id: shorter than configured while duplicateWindowMaxEntries "
                    "evicts", w.effective_window_ms / 1000.0)
        yield counter("duplicate_window_hits", "Sends answered with their original's receipt "
                      "(a retry: nothing written)", w.hits)
        yield counter("duplicate_window_refusals", "Sends refused for reusing a message id "
                      "of another message within the window", w.refusals)
        yield counter("duplicate_window_evictions", "Message ids evicted by "
                      "duplicateWindowMaxEntries before the window's time", w.evictions)

    def _latencies(self) -> Iterator[Metric]:
        store = self.node.store
        put = HistogramMetricFamily(P + "put_latency_seconds", "Puts on this node as master: "
                                    "append, flush and replication wait, by status",
                                    labels=["status"])
        for status, h in store.put_latency.items():
            buckets, total, _ = h.snapshot()
            put.add_metric([status], [(_le(b), n) for b, n in buckets], total)
        yield put
        flush = HistogramMetricFamily(P + "flush_latency_seconds", "Commitlog flushes that "
                                      "wrote something (msync/fdatasync)")
        buckets, total, _ = store.flush_latency.snapshot()
        flush.add_metric([], [(_le(b), n) for b, n in buckets], total)
        yield flush
        yield gauge("flush_failed", "1 once a commitlog flush failed (the store then refuses "
                    "writes until a restart)", 1 if store.commitlog_flush_error is not None else 0)

    def _replication(self, s) -> Iterator[Metric]:
        if not s.role.endswith("MASTER"):
            return
        labels = ["slave"]
        ack = GaugeMetricFamily(P + "slave_ack_offset", "Offset each slave acked", labels=labels)
        lag = GaugeMetricFamily(P + "slave_lag_bytes", "Master max offset - slave ack",
                                labels=labels)
        lag_s = GaugeMetricFamily(P + "slave_lag_seconds", "Seconds since the slave last "
                                  "caught up with the master", labels=labels)
        in_sync = GaugeMetricFamily(P + "slave_in_sync", "1 while the slave is in sync",
                                    labels=labels)
        for sl in s.slaves:
            ack.add_metric([sl.node_id], sl.ack_offset)
            lag.add_metric([sl.node_id], sl.lag_bytes)
            lag_s.add_metric([sl.node_id], max(0, sl.last_caught_up_age_ms) / 1000.0)
            in_sync.add_metric([sl.node_id], 1 if sl.in_sync else 0)
        yield from (ack, lag, lag_s, in_sync)
        yield from self._ack_latency(s)
        yield gauge("in_sync_replicas", "Slaves in sync with this master", len(s.in_sync_set))
        yield gauge("sync_state_set_size", "Members of the controller's sync state set",
                    len(s.sync_state_set))

    def _ack_latency(self, s) -> Iterator[Metric]:
        """Each slave's ack latency and in-sync changes (the slow-member rule's figures)."""
        def per_slave(kind, name: str, doc: str, value) -> Metric:
            f = kind(P + name, doc, labels=["slave"])
            for sl in s.slaves:
                f.add_metric([sl.node_id], value(sl))
            return f
        yield per_slave(GaugeMetricFamily, "slave_ack_latency_seconds", "How long puts wait "
                        "for the slave's ack: the median over haSlowSlaveDetectWindow, or the "
                        "pending age when larger", lambda sl: sl.ack_latency_ms / 1000)
        yield per_slave(GaugeMetricFamily, "slave_ack_latency_p99_seconds", "p99 of the "
                        "slave's ack latency over haSlowSlaveDetectWindow",
                        lambda sl: sl.ack_latency_p99_ms / 1000)
        yield per_slave(GaugeMetricFamily, "slave_ack_pending_seconds", "Age of the oldest "
                        "waited-for data the slave has not acked", lambda sl: sl.pending_ms / 1000)
        yield per_slave(GaugeMetricFamily, "slave_held_out", "1 while the slave is held out "
                        "of the in-sync set as slow", lambda sl: 1 if sl.held_out else 0)
        yield per_slave(CounterMetricFamily, "slave_in_sync_changes", "Leaves and joins of the "
                        "in-sync set in this master term", lambda sl: sl.in_sync_changes)
        yield per_slave(CounterMetricFamily, "slave_released_puts", "Puts whose replication "
                        "wait this slave's ack ended", lambda sl: sl.released_puts)
        yield per_slave(CounterMetricFamily, "slave_released_wait_seconds", "The summed wait "
                        "of those puts", lambda sl: sl.released_wait_ms / 1000)
        last = GaugeMetricFamily(P + "slave_last_in_sync_change", "1: the slave's last in-sync "
                                 "change (left/joined) and its cause",
                                 labels=["slave", "change", "cause"])
        for sl in s.slaves:
            if sl.last_change_cause:
                change = "joined" if sl.last_change.startswith("joined") else "left"
                last.add_metric([sl.node_id, change, sl.last_change_cause], 1)
        yield last

    def _disk(self) -> Iterator[Metric]:
        c = self.node.store.config
        g = GaugeMetricFamily(P + "disk_used_ratio", "Used ratio (0..1) of the file system",
                              labels=["path"])
        for path in dict.fromkeys((c.commit_log_dir, c.store_path_root_dir)):
            try:
                g.add_metric([path], default_disk_usage(path))
            except OSError:
                log.debug("disk usage of %s unavailable", path, exc_info=True)
        yield g

    def _consumers(self, s) -> Iterator[Metric]:
        messaging = self.node.messaging
        if messaging is None or not s.role.endswith("MASTER"):
            return
        labels = ["group", "topic", "queue"]
        lag = GaugeMetricFamily(P + "consumer_lag_messages", "Messages not yet consumed",
                                labels=labels)
        inflight = GaugeMetricFamily(P + "consumer_inflight_messages",
                                     "Messages received and not yet acked", labels=labels)
        try:
            for group in messaging.consumers.list_groups():
                for q in messaging.consumers.progress(group.name):
                    key = [group.name, q.topic, str(q.queue_id)]
                    lag.add_metric(key, q.lag)
                    inflight.add_metric(key, q.inflight)
        except Exception:  # noqa: BLE001 - a role change under the scrape: skip this round
            log.debug("consumer progress unavailable", exc_info=True)
        yield lag
        yield inflight

    def _retention(self) -> Iterator[Metric]:
        retention = self.node.store.retention
        if retention is None:
            return
        yield counter("retention_deleted_files", "Commitlog files retention deleted",
                      retention.deleted_total)
        yield counter("retention_unarchived_deleted_files", "Commitlog files disk pressure "
                      "deleted before the archive had them", retention.unarchived_deleted)
        c = CounterMetricFamily(P + "retention_unconsumed_deleted",
                                "Unconsumed messages forced cleanup deleted", labels=["group"])
        for group, n in sorted(retention.unconsumed_deleted.items()):
            c.add_metric([group], n)
        yield c

    def _archive(self) -> Iterator[Metric]:
        shipper = self.node.shipper
        if shipper is None:
            return
        st = shipper.stats
        yield counter("archive_shipped_files", "Files shipped to the archive", st.files)
        yield counter("archive_shipped_bytes", "File bytes shipped", st.raw_bytes)
        yield counter("archive_sent_bytes", "Compressed bytes sent", st.sent_bytes)
        yield counter("archive_refused_files", "Files the archive refused", st.refused)

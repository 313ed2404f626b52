"""The console's JSON API. The controller answers for the whole cluster from its own state
(groups, nodes, elections) and asks each group's master (Admin API, with the controller's admin
token: the cluster shares one) for topics, consumer groups and message lookups, and the
announced archives for history. A node answers for itself.

    /api/cluster               controller: every group as the controller sees it, and the
                               archives announced to it
    /api/replication           controller: each group's master's slaves (ack latency, in sync,
                               the last in-sync change and why), asked of the master
    /api/topics?group=G        topics (messages) and consumer groups (lag, in flight) of G
    /api/messages?group=G&topic=T&key=K | id=ID    a lookup on G's master (node: on itself)
    /api/history?topic=T&key=K | id=ID | begin=MS&end=MS   the archives' lookups
    /api/trends[?group=G]      controller: each group's last 15 minutes and what needs
                               attention now (below; cluster/console/trends.py)
    /api/node                  node: its status

/api/trends samples what the nodes' heartbeats carry (proto/controller.proto NodeLoad), every
5 s on the controller into a ring of 180 samples per broker group (keyed by brokerName: every
group the controller knows has its series). A group unknown to the controller is a 404; a
controller without its sampler (no metricsListenAddress) a 503; a standby's is a 409 like the
other paths. The answer, its series column by column (one entry per sample, the oldest first):

    {"interval_s": 5.0, "window_s": 900.0,        the sampling and the ring's span
     "growing_samples": 5, "growing_min_rise": 100,   what lag_growing means (trends.py)
     "groups": [{"group": "broker-a",
                 "at_ms": [1700000000000, ...],   wall clock of each sample (int)
                 "produce_per_s": [212.4, ...],   client messages stored a second (float,
                                                  0.1 precision; null: unknown, e.g. the
                                                  first sample after a start)
                 "consume_per_s": [208.0, ...],   messages handed to consumers a second
                                                  (receives and pulls; redeliveries count)
                 "lag": [1234, ...],              messages not consumed, all consumer groups
                                                  (int; null while the master does not know)
                 "consumer_lag": {"orders": [1200, ...], ...},   the same per consumer group
                                                  (null where a group was not known yet)
                 "masters": [[1700000000000, "broker-a:0"], ...]}],   the master from each
                                                  time on: one entry per change ("" none)
     "highlights": [{"level": "critical" | "warning", "kind": "no_master" | "silent" |
                     "unhealthy" | "out_of_sync_set" | "out_of_sync" | "disk" | "lag_growing",
                     "group": "broker-a", "node": "broker-a:2" or "",
                     "consumer_group": "orders" or "", "reason": "no heartbeat for 12 s"}]}
                                                  the critical first

Its size: a full ring of one group is about 6 KB of JSON (180 times of 13 digits, two rates
of 5-6 characters, the total lag), plus about 1.4 KB per consumer group's column at 6-digit
lags (and as much again for the total's digits), some 150 bytes a highlight; the page asks
for it every 2.5 s (tests/console/test_trends.py measures a full window).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import grpc

from proto import admin_pb2 as admin_pb

from cluster.admin.message_lookup import lookup, request_from_params
from cluster.archive.registry import ArchiveEntry
from cluster.client.admin_client import AdminClient
from cluster.client.archive_client import ArchiveClient
from cluster.controller.active_gate import NotActiveController
from cluster.controller.controller_servicer import group_to_pb
from cluster.console import trends
from cluster.metrics.exposition import Api, ApiError, Page, proto_json

if TYPE_CHECKING:
    from cluster.assembly.controller_process import ControllerProcess
    from cluster.assembly.node import Node

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
TIMEOUT_S = 5.0
REPLICATION_TIMEOUT_S = 2.0  # the page asks every 2 s
MAX_PARALLEL = 8
MAX_LOOKUP = 50


def pages() -> dict[str, Page]:
    with open(os.path.join(STATIC, "console.html"), "rb") as fh:
        html = fh.read()
    return {"/": ("text/html; charset=utf-8", html), "/console": ("text/html; charset=utf-8", html)}


def message_rows(r: admin_pb.GetMessagesResponse) -> list[dict[str, Any]]:
    return [{"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
             "msg_id": m.msg_id, "unique_key": m.unique_key, "tags": m.tags, "keys": m.keys,
             "store_timestamp": m.store_timestamp, "body_size": m.body_size,
             "body": m.body[:512].decode("utf-8", "replace")} for m in r.messages]


def lookup_request(p: dict[str, str]) -> admin_pb.QueryMessagesRequest:
    """The page's lookup (message_lookup checks the rest), at most MAX_LOOKUP answers."""
    req = request_from_params(p)
    req.max_count = MAX_LOOKUP
    return req


def _refused(what: str, e: grpc.RpcError) -> ApiError:
    """A refusal of the master or an archive: the caller's fault (400) or theirs (502)."""
    status = 400 if e.code() is grpc.StatusCode.INVALID_ARGUMENT else 502
    return ApiError(status, f"{what}: {e.code().name}: {e.details()}")


class ControllerApi:
    """The controller's console API (the paths in the module docstring)."""

    def __init__(self, process: "ControllerProcess") -> None:
        self.process = process

    def routes(self) -> dict[str, Api]:
        return {"/api/cluster": self.cluster, "/api/topics": self.topics,
                "/api/replication": self.replication, "/api/messages": self.messages,
                "/api/history": self.history, "/api/trends": self.trends}

    def _snapshots(self):
        try:
            return self.process.service.snapshots()
        except NotActiveController as e:
            raise ApiError(409, str(e)) from None

    def _archives(self) -> list:
        servicer = self.process.servicer
        return servicer.archives.archives(self.process.clock.monotonic()) if servicer else []

    def cluster(self, p: dict[str, str]) -> dict[str, Any]:
        return {"controller": self.process.address,
                "groups": [proto_json(group_to_pb(g)) for g in self._snapshots()],
                "archives": [proto_json(a) for a in self._archives()]}

    def trends(self, p: dict[str, str]) -> dict[str, Any]:
        """Each group's series (the sampler's ring) and what needs attention now."""
        sampler = self.process.trends
        if sampler is None:
            raise ApiError(503, "this controller keeps no trends (it has not started)")
        group = p.get("group", "")
        snapshots = self._snapshots()
        if group and group not in {g.record.broker_name for g in snapshots}:
            raise ApiError(404, f"no broker group {group!r}")
        series = sampler.series()
        silent_s = self.process.config.election.failover_timeout_ms / 1000
        found = trends.highlights(snapshots, series, silent_s)
        return {"interval_s": sampler.interval_s, "window_s": sampler.window_s,
                "growing_samples": trends.GROWING_SAMPLES,
                "growing_min_rise": trends.GROWING_MIN_RISE,
                "groups": [trends.series_json(name, samples) for name, samples in series.items()
                           if not group or name == group],
                "highlights": [trends.highlight_json(h) for h in found
                               if not group or h.group == group]}

    def _master(self, group: str, timeout: float = TIMEOUT_S) -> AdminClient:
        for g in self._snapshots():
            rec = g.record
            if rec.broker_name == group or not group:
                address = rec.addresses.get(rec.master_id, "")
                if not rec.master_id or not address:
                    raise ApiError(503, f"group {rec.broker_name} has no master now")
                return AdminClient(address, self.process.token, timeout=timeout,
                                   tls=self.process.config.tls.client())
        raise ApiError(404, f"no broker group {group!r}")

    def replication(self, p: dict[str, str]) -> dict[str, Any]:
        """Each group's master's slave table, the masters asked at once with a short timeout:
        one slow or dead master delays nobody else's row, and its row says why it is empty."""
        names = [g.record.broker_name for g in self._snapshots()]
        masters = {g.record.broker_name: g.record.master_id for g in self._snapshots()}
        if not names:
            return {"groups": []}
        with ThreadPoolExecutor(max_workers=min(len(names), MAX_PARALLEL)) as pool:
            rows = list(pool.map(self._slaves_of, names))
        return {"groups": [{"group": n, "master": masters.get(n, ""), **row}
                           for n, row in zip(names, rows)]}

    def _slaves_of(self, group: str) -> dict[str, Any]:
        try:
            with self._master(group, REPLICATION_TIMEOUT_S) as admin:
                return {"slaves": [proto_json(s) for s in admin.status().slaves]}
        except ApiError as e:
            return {"slaves": [], "error": str(e)}
        except grpc.RpcError as e:
            return {"slaves": [], "error": str(_refused("the master", e))}

    def topics(self, p: dict[str, str]) -> dict[str, Any]:
        with self._master(p.get("group", "")) as admin:
            try:
                topics = admin.list_topics(with_offsets=True).topics
                groups = []
                for g in admin.list_groups().groups:
                    progress = admin.consumer_progress(g.name)
                    groups.append({"name": g.name, "lag": progress.total_lag,
                                   "inflight": progress.total_inflight})
            except grpc.RpcError as e:
                raise _refused("the master", e) from None
        return {"topics": [{"name": t.name, "queues": t.read_queue_nums,
                            "messages": t.messages} for t in topics], "groups": groups}

    def messages(self, p: dict[str, str]) -> dict[str, Any]:
        req = lookup_request(p)
        with self._master(p.get("group", "")) as admin:
            try:
                r = admin.query(req.topic, req.key, req.max_count, msg_id=req.msg_id)
            except grpc.RpcError as e:
                raise _refused("the master", e) from None
        return {"messages": message_rows(r)}

    def history(self, p: dict[str, str]) -> dict[str, Any]:
        req = lookup_request(p)
        rows: list[dict[str, Any]] = []
        for a in self._archives():
            entry = ArchiveEntry(a.archive_id, a.address, a.http_address, {}, 0, a.token_file)
            token = _token_of(entry) or self.process.token
            with ArchiveClient(a.address, token, self.process.config.tls.client(),
                               timeout=TIMEOUT_S) as client:
                try:
                    r = client.query(req)
                except grpc.RpcError as e:
                    raise _refused(f"archive {a.address}", e) from None
            rows += [{**row, "archive": a.archive_id} for row in message_rows(r)]
        return {"messages": rows, "archives": len(self._archives())}


def _token_of(entry: ArchiveEntry) -> str:
    """The archive's token from the file it announced, when this machine can read it."""
    try:
        with open(entry.token_file, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


class NodeApi:
    """A node's own console API: its status and lookups in its own store."""

    def __init__(self, node: "Node") -> None:
        self.node = node

    def routes(self) -> dict[str, Api]:
        return {"/api/node": self.status, "/api/messages": self.messages}

    def status(self, p: dict[str, str]) -> dict[str, Any]:
        return proto_json(self.node.status())

    def messages(self, p: dict[str, str]) -> dict[str, Any]:
        req = lookup_request(p)
        topics = sorted({cq.topic for cq in self.node.store.consume_queues()})
        return {"messages": message_rows(lookup(self.node.store, req, lambda: topics))}

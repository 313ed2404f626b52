"""The cluster-wide checks of an audit over several broker groups (plain objects, no Spark).

Each group is audited as one group is (cluster.audit.job.run_groups); its reference replica's
topic table over the whole log (what the group's master serves and registers: see
cluster/assembly/route_sync.py, the registration is the replicated table's topics as they are)
is the group's `GroupTable`. Against them:

* the controller's route registry (`ClusterRoute`, fetched when the copies were pulled and saved
  beside them as route.json, see `route_file`) must list every audited group with the topics of
  its table, each with the same config (queue numbers, perm, and the other fields a
  registration carries);
* a topic held by several groups should have the same queue numbers in each.

Findings (model.finding dicts with a `group` key: the group, or the groups joined by ","), and
why each severity:

    route_group_missing      error    an audited group the registry does not know: no client is
                                      routed to its queues (QueryRoute on any node answers from
                                      the registry for the other groups)
    route_topic_mismatch     error    the registry's topic for a group differs from the group's
                                      table (`problem`: "not in the group's table", "not
                                      registered", or the differing fields) while the
                                      registration is of the same table version as the copy
                                      (its `c<changes>-t<timestamp>` equals the table's
                                      dataVersion): clients are routed to queues the group does
                                      not have (or not to queues it has) for good
                             warning  the same, when the registered version is another than the
                                      copy's, the route's version moved while the copies were
                                      pulled, or the group's table replay is incomplete: a
                                      master registers a change at its next heartbeat, so the
                                      registry may trail the copy by one; run the audit again,
                                      a warning that stays means the registration is stuck
    route_group_unregistered warning  the registry knows the group but holds no registration from
                                      its master since the controller started (its topics are
                                      not compared): the master registers at its next heartbeat
    route_group_not_audited  warning  the registry lists a group the audit did not pull (its
                                      replicas went unchecked)
    route_unavailable        warning  no route to compare with (the controller did not answer
                                      when the copies were pulled; `info` for an --offline audit
                                      of a stopped cluster, where there is none to fetch)
    topic_queues_differ      warning  a topic several groups hold with other read/write queue
                                      numbers: nothing is lost or unroutable (each group routes
                                      its own queues), but producers spread the topic's messages
                                      unevenly and FIFO message groups hash over another set of
                                      queues than `topic create --groups` (the same count
                                      everywhere) gave; usually a `topic update` on one group
                                      only. A topic in one group only (auto-created) is not a
                                      finding.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from store.json_config import TopicConfig
from store.validation import is_system_topic

from cluster.audit.model import ERROR, INFO, WARNING, finding
from cluster.config.cluster_route import ClusterRoute, GroupRoute

KINDS = ("route_group_missing", "route_topic_mismatch", "route_group_unregistered",
         "route_group_not_audited", "route_unavailable", "topic_queues_differ")
ROUTE_FILE = "route.json"
_VERSION = re.compile(r"^c(-?\d+)-t(-?\d+)(?:-|$)")


@dataclass(frozen=True)
class GroupTable:
    """One group's replicated topic table as the audit read it: from its reference replica's
    copy, over the whole log; `data_version` is (timestamp ms, changes); `complete` False when
    the replay stopped at a bad record."""

    group: str
    replica: str
    data_version: tuple[int, int]
    topics: Mapping[str, TopicConfig] = field(default_factory=dict)
    complete: bool = True

    @classmethod
    def from_metadata(cls, group: str, metadata: dict) -> "GroupTable | None":
        """From the `reference_table` of cluster.audit.metadata.summary (None without one)."""
        t = metadata.get("reference_table")
        if not t:
            return None
        ts, changes = t["data_version"]
        return cls(group, t["replica"], (int(ts), int(changes)),
                   {name: TopicConfig.from_json(c) for name, c in t["topics"].items()},
                   bool(t.get("complete", True)))


@dataclass(frozen=True)
class SavedRoute:
    """The registry as `cluster audit` fetched it: the route after the pulls and the route's
    version before them (`stable`: the same, so no group's registration changed meanwhile)."""

    route: ClusterRoute
    version_before: str = ""
    controller: str = ""

    @property
    def stable(self) -> bool:
        return not self.version_before or self.version_before == self.route.version


# -- route.json ----------------------------------------------------------------------------------
def route_to_json(saved: SavedRoute) -> dict[str, Any]:
    r = saved.route
    return {"controller": saved.controller, "version_before": saved.version_before,
            "version": r.version, "groups": [
                {"broker_name": g.broker_name, "master_id": g.master_id,
                 "master_address": g.master_address, "note": g.note, "endpoints": list(g.endpoints),
                 "registered": g.registered, "topics_version": g.topics_version,
                 "topics": [t.to_json() for t in g.topics.values()]} for g in r.groups]}


def route_from_json(obj: dict[str, Any]) -> SavedRoute:
    """ValueError (ConfigError) on a malformed file."""
    groups = tuple(GroupRoute(g["broker_name"], master_id=g.get("master_id", ""),
                              master_address=g.get("master_address", ""), note=g.get("note", ""),
                              endpoints=tuple(g.get("endpoints", ())),
                              registered=bool(g.get("registered")),
                              topics=[TopicConfig.from_json(t) for t in g.get("topics", ())],
                              topics_version=g.get("topics_version", ""))
                   for g in obj.get("groups", ()))
    return SavedRoute(ClusterRoute(obj.get("version", ""), groups), obj.get("version_before", ""),
                      obj.get("controller", ""))


# -- checks --------------------------------------------------------------------------------------
def _finding(group: str, kind: str, sev: str, replica: str = "", topic: str | None = None,
             **details) -> dict:
    f = finding(replica, kind, sev, None, topic, None, None, **details)
    f["group"] = group
    return f


def registered_data_version(topics_version: str) -> tuple[int, int] | None:
    """(timestamp, changes) of a registration's version (route_sync.registration_version:
    `c<changes>-t<timestamp>-e<endpoints crc>`), None when it is not of that form."""
    m = _VERSION.match(topics_version or "")
    return (int(m.group(2)), int(m.group(1))) if m else None


def _differing(a: dict, b: dict) -> list[str]:
    return [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def route_findings(saved: SavedRoute | None, tables: Mapping[str, GroupTable | None],
                   missing_severity: str = WARNING, missing_reason: str = "") -> list[dict]:
    """The registry against each audited group's table (`tables`: group -> its table, None
    when the group's audit has none)."""
    if saved is None:
        return [_finding("", "route_unavailable", missing_severity,
                         reason=missing_reason or "no route was saved with the copies")]
    route = saved.route
    out = []
    for name in sorted(g.broker_name for g in route.groups if g.broker_name not in tables):
        out.append(_finding(name, "route_group_not_audited", WARNING,
                            reason="the registry lists this group; the audit pulled none of its nodes"))
    for group, table in sorted(tables.items()):
        g = route.group(group)
        if g is None:
            out.append(_finding(group, "route_group_missing", ERROR,
                                reason="the registry does not know the group: no route leads to its queues",
                                route_groups=[x.broker_name for x in route.groups]))
            continue
        if not g.registered:
            out.append(_finding(group, "route_group_unregistered", WARNING,
                                reason="no registration from the group's master since the controller "
                                       "started: its topics were not compared"))
            continue
        if table is None:
            continue
        registered = registered_data_version(g.topics_version)
        same = registered == table.data_version
        why_warning = [w for w, bad in (
            (f"registered version {g.topics_version!r} is not the copy's table version "
             f"{list(table.data_version)}", not same),
            ("the route's version changed while the copies were pulled", not saved.stable),
            ("the group's table replay is incomplete", not table.complete)) if bad]
        sev = WARNING if why_warning else ERROR
        for topic in sorted(set(g.topics) | set(table.topics)):
            mine, theirs = table.topics.get(topic), g.topics.get(topic)
            if mine is not None and theirs is not None:
                fields = _differing(mine.to_json(), theirs.to_json())
                if not fields:
                    continue
                problem = "differs in " + ",".join(fields)
            else:
                problem = "not in the group's table" if mine is None else "not registered"
            out.append(_finding(group, "route_topic_mismatch", sev, table.replica, topic,
                                problem=problem, table=mine and mine.to_json(),
                                registered=theirs and theirs.to_json(),
                                registered_version=g.topics_version,
                                table_version=list(table.data_version),
                                why_warning="; ".join(why_warning) or None))
    return out


def queue_count_findings(tables: Mapping[str, GroupTable | None]) -> list[dict]:
    """A (non-system) topic several groups hold with other read/write queue numbers."""
    held: dict[str, dict[str, TopicConfig]] = {}
    for group, table in tables.items():
        for name, config in (table.topics.items() if table is not None else ()):
            if not is_system_topic(name):
                held.setdefault(name, {})[group] = config
    out = []
    for topic, configs in sorted(held.items()):
        counts = {g: (c.read_queue_nums, c.write_queue_nums) for g, c in sorted(configs.items())}
        if len(configs) < 2 or len(set(counts.values())) == 1:
            continue
        out.append(_finding(",".join(counts), "topic_queues_differ", WARNING, "", topic,
                            queues={g: {"read": r, "write": w} for g, (r, w) in counts.items()}))
    return out


def cluster_findings(saved: SavedRoute | None, tables: Mapping[str, GroupTable | None],
                     missing_severity: str = WARNING, missing_reason: str = "") -> list[dict]:
    """Every cluster-wide finding, errors first, then by kind, group and topic."""
    found = route_findings(saved, tables, missing_severity, missing_reason) + queue_count_findings(tables)
    rank = {ERROR: 0, WARNING: 1, INFO: 2}
    return sorted(found, key=lambda f: (rank[f["severity"]], f["kind"], f["group"], f["topic"] or ""))


def counts(findings: Iterable[dict]) -> dict[str, Any]:
    """{error, warning, info, by_kind: {kind: {severity: n}}}."""
    out: dict[str, Any] = {ERROR: 0, WARNING: 0, INFO: 0, "by_kind": {}}
    for f in findings:
        out[f["severity"]] += 1
        kind = out["by_kind"].setdefault(f["kind"], {})
        kind[f["severity"]] = kind.get(f["severity"], 0) + 1
    return out

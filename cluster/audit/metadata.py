"""Driver side: the replicated metadata of every replica, replayed with the node's own state
machines, and the metadata findings (the same code for Spark and the plain-Python reference).

The topic table (`rmq_sys_TOPIC_TABLE`, cluster.metadata.topic_state.TopicState) and the
consumer state (`rmq_sys_CONSUMER_STATE`, cluster.consume.state.ConsumerState) are records of
internal topics (cluster.replicated.table_records). The scan hands over, per replica and table,
the valid records it holds in log order as TableEvents (Spark: the table rows of
cluster.audit.scan from the newest snapshot below the group bound on, plus every delete record;
the reference: every record, decoded again with store.codec). Nothing here re-implements a
state machine: each event goes through the table's TableRecords.from_body and its state's apply.

Two replays per replica and table:
* at the group bound, the lowest confirm offset of all replicas: the records below it must be
  the same on every replica, so these states are compared between replicas (topic tables,
  committed consumer offsets). A replica whose log has unread holes below the bound replays
  without them (the finding says so);
* over the whole log: what the replica would serve as master (its routes; a slave follows its
  topic table up to its confirm offset, and its queues are dispatched up to there too). Its
  routes are checked against the queues that hold messages, its committed offsets against its
  queues' ends, and the reference's give the consumer lag per group.
Replay from the newest snapshot below the bound equals the replay of everything (a snapshot
replaces the whole state); the reference replays everything, so the tests check that too. A
record that does not decode or apply stops that replica's replay of the table, as it stops a
node's (`table_record_bad`).

Findings and severities:
    unroutable_queue          a queue holds messages (live consume-queue units or commitlog
                              records) that the replica's topic table does not route: the topic
                              is missing or the queue id >= its readQueueNums (error); the topic
                              was deleted by a delete record (info: its data stays until
                              retention). System topics (store.validation) are not routed.
    topic_table_mismatch      a topic whose config at the bound differs from the reference's
                              (missing on one side, or the fields named), or equal topics with
                              another dataVersion (error)
    consumer_offset_mismatch  a committed offset (group, topic, queue) at the bound that differs
                              from the reference's or exists on one side only (error)
    table_record_bad          a table record that does not decode or apply (error)
and, with the table's committed offsets and the `config/consumerOffset.json` view together
(`source`), model.consumer_offset_findings (ahead of the queue end / expired).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from store.validation import is_system_topic

from cluster.audit.model import ERROR, INFO, ReplicaFacts, consumer_offset_findings, finding
from cluster.audit.scan import TABLE_DELETE, TABLE_SNAPSHOT
from cluster.consume.records import CONSUMER_STATE_RECORDS, STATE_TOPIC
from cluster.consume.state import ConsumerState
from cluster.metadata.topic_state import TOPIC_RECORDS, TOPIC_TABLE_TOPIC, TopicState
from cluster.replicated.table_records import TableRecords

TABLES: dict[str, tuple[TableRecords, Callable[[], Any]]] = {
    TOPIC_TABLE_TOPIC: (TOPIC_RECORDS, TopicState),
    STATE_TOPIC: (CONSUMER_STATE_RECORDS, ConsumerState),
}


class TableEvent(NamedTuple):
    phys: int
    mark: int  # scan.TABLE_OTHER / TABLE_SNAPSHOT / TABLE_DELETE (from the record's tag)
    body: bytes


@dataclass
class Replay:
    state: Any
    applied: int = 0
    error: tuple[int, str] | None = None  # (offset, why) of the record the replay stopped at


@dataclass
class ReplicaMetadata:
    name: str
    records: dict[str, int]  # table topic -> records the replica holds
    topics: Replay  # whole log
    topics_at_bound: Replay
    consumers: Replay
    consumers_at_bound: Replay
    deleted: dict[str, int] = field(default_factory=dict)  # topic -> offset of its last delete


def group_bound(facts: dict[str, ReplicaFacts]) -> int:
    """The lowest confirm offset of the group: below it every replica holds the same records."""
    return min((f.layout.confirm_offset for f in facts.values()), default=0)


def snapshot_start(events: list[TableEvent], bound: int) -> int | None:
    """Offset of the newest snapshot record below `bound`, or None."""
    start = None
    for e in events:
        if e.mark == TABLE_SNAPSHOT and e.phys < bound:
            start = e.phys if start is None else max(start, e.phys)
    return start


def replay(table: str, events: list[TableEvent], below: int | None = None,
           start: int | None = None) -> Replay:
    """The table's state after applying the events at or after `start` and below `below`, in
    log order, with the table's own state machine; stops at the first that fails."""
    records, new_state = TABLES[table]
    out = Replay(new_state())
    for e in events:
        if start is not None and e.phys < start:
            continue
        if below is not None and e.phys >= below:
            break
        try:
            out.state.apply(records.from_body(e.body, f"at {e.phys}"))
        except (ValueError, KeyError, TypeError) as err:  # TableRecordError is a ValueError
            out.error = (e.phys, f"{type(err).__name__}: {err}")
            break
        out.applied += 1
    return out


def _deleted(events: list[TableEvent]) -> dict[str, int]:
    """topic -> offset of its last delete record (TopicState's delete event: {"topic": name})."""
    out: dict[str, int] = {}
    for e in events:
        if e.mark != TABLE_DELETE:
            continue
        try:
            name = TOPIC_RECORDS.from_body(e.body).get("topic")
        except ValueError:
            continue  # reported by the replay
        if isinstance(name, str):
            out[name] = e.phys
    return out


def replay_replicas(facts: dict[str, ReplicaFacts], events: dict[str, dict[str, list[TableEvent]]],
                    counts: dict[str, dict[str, int]], from_snapshot: bool) -> dict[str, ReplicaMetadata]:
    """Both replays of both tables of every replica. events[replica][table] in log order (a
    replica or table without records may be absent); from_snapshot: start at the newest
    snapshot below the group bound (the events before it may be missing, except deletes)."""
    bound = group_bound(facts)
    out = {}
    for name in facts:
        mine = events.get(name, {})
        replays = {}
        for table in TABLES:
            evs = sorted(mine.get(table, []))
            start = snapshot_start(evs, bound) if from_snapshot else None
            replays[table] = (replay(table, evs, None, start), replay(table, evs, bound, start))
        out[name] = ReplicaMetadata(
            name, {t: counts.get(name, {}).get(t, 0) for t in TABLES},
            *replays[TOPIC_TABLE_TOPIC], *replays[STATE_TOPIC],
            deleted=_deleted(sorted(mine.get(TOPIC_TABLE_TOPIC, []))))
    return out


# -- findings -------------------------------------------------------------------------------------
def findings(facts: dict[str, ReplicaFacts], ref_name: str, meta: dict[str, ReplicaMetadata],
             holding: dict[tuple[str, str, int], tuple[int, int]], queues: list[dict]) -> list[dict]:
    """holding: {(replica, topic, queue_id): (first offset, last queue offset)} of the valid
    dispatchable commitlog records of each queue; queues: model.queue_table rows."""
    return (_bad_records(meta) + _unroutable(facts, meta, holding, queues)
            + _topic_differences(facts, ref_name, meta) + _offset_differences(facts, ref_name, meta))


def _bad_records(meta: dict[str, ReplicaMetadata]) -> list[dict]:
    out = []
    for name, m in meta.items():
        for table, r in ((TOPIC_TABLE_TOPIC, m.topics), (STATE_TOPIC, m.consumers)):
            if r.error is not None:
                out.append(finding(name, "table_record_bad", ERROR, r.error[0], table, 0,
                                   reason=r.error[1], applied_before=r.applied))
    return out


def _unroutable(facts, meta, holding, queues) -> list[dict]:
    held: dict[tuple[str, str, int], dict] = {}
    for q in queues:
        if q["max_offset"] > q["min_offset"]:
            held.setdefault((q["replica"], q["topic"], q["queue_id"]), {}).update(
                cq_min_offset=q["min_offset"], cq_max_offset=q["max_offset"])
    for key, (first, last_qo) in holding.items():
        held.setdefault(key, {}).update(first_offset=first, last_queue_offset=last_qo)
    out = []
    for (name, topic, qid), info in sorted(held.items()):
        if name not in meta or is_system_topic(topic):
            continue
        m = meta[name]
        config = m.topics.state.get(topic)
        if config is not None and qid < config.read_queue_nums:
            continue
        if config is not None:
            sev, why = ERROR, f"queue id {qid} >= readQueueNums {config.read_queue_nums}"
        elif topic in m.deleted:
            sev, why = INFO, f"topic deleted at {m.deleted[topic]}: its messages stay until retention"
        else:
            sev, why = ERROR, "topic missing from the topic table"
        out.append(finding(name, "unroutable_queue", sev, info.get("first_offset"), topic, qid, None,
                           reason=why, read_queue_nums=config and config.read_queue_nums,
                           **{k: info.get(k) for k in ("cq_min_offset", "cq_max_offset",
                                                        "last_queue_offset")},
                           table_incomplete=True if m.topics.error else None))
    return out


def _holes_below(f: ReplicaFacts, bound: int) -> bool | None:
    return True if any(a < bound for a, _ in f.holes) or f.valid_end < bound else None


def _topic_differences(facts, ref_name, meta) -> list[dict]:
    bound = group_bound(facts)
    ref = meta[ref_name].topics_at_bound.state
    theirs = {c.topic_name: c.to_json() for c in ref.all()}
    out = []
    for name, m in meta.items():
        if name == ref_name:
            continue
        st = m.topics_at_bound.state
        mine = {c.topic_name: c.to_json() for c in st.all()}
        incomplete = _holes_below(facts[name], bound)
        found = False
        for topic in sorted(set(mine) | set(theirs)):
            a, b = mine.get(topic), theirs.get(topic)
            if a == b:
                continue
            found = True
            if a is None or b is None:
                fields = "missing" if a is None else "extra"
            else:
                fields = ",".join(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
            out.append(finding(name, "topic_table_mismatch", ERROR, None, topic, None, None,
                               bound=bound, fields=fields, config=a, reference_config=b,
                               replica_holes_below_bound=incomplete))
        if not found and st.data_version != ref.data_version:
            out.append(finding(name, "topic_table_mismatch", ERROR, None, None, None, None, bound=bound,
                               fields="dataVersion", data_version=list(st.data_version),
                               reference_data_version=list(ref.data_version),
                               replica_holes_below_bound=incomplete))
    return out


def committed(state: ConsumerState) -> dict[tuple[str, str, int], int]:
    """(group, topic, queue) -> committed offset (where a consumer of the group resumes)."""
    return {key: q.committed for key, q in state.queues.items()}


def _offset_differences(facts, ref_name, meta) -> list[dict]:
    bound = group_bound(facts)
    theirs = committed(meta[ref_name].consumers_at_bound.state)
    out = []
    for name, m in meta.items():
        if name == ref_name:
            continue
        mine = committed(m.consumers_at_bound.state)
        incomplete = _holes_below(facts[name], bound)
        for key in sorted(set(mine) | set(theirs)):
            a, b = mine.get(key), theirs.get(key)
            if a != b:
                group, topic, qid = key
                out.append(finding(name, "consumer_offset_mismatch", ERROR, None, topic, qid, a,
                                   group=group, bound=bound, reference_committed=b,
                                   missing="on the replica" if a is None
                                   else "on the reference" if b is None else None,
                                   replica_holes_below_bound=incomplete))
    return out


# -- consumer offsets: the table and the view -----------------------------------------------------
def consumer_offsets(facts: dict[str, ReplicaFacts], meta: dict[str, ReplicaMetadata]
                     ) -> dict[str, dict[tuple[str, str, int], dict[int, str]]]:
    """{replica: {(topic, group, queue): {offset: source}}}: the committed offsets of the
    replica's consumer table (whole log; source `table`) and of its config/consumerOffset.json
    (`view`); an offset both give is `table,view`."""
    out: dict[str, dict[tuple[str, str, int], dict[int, str]]] = {}
    for name, f in facts.items():
        mine = out.setdefault(name, {})
        if name in meta:
            for (group, topic, qid), off in committed(meta[name].consumers.state).items():
                mine.setdefault((topic, group, qid), {})[off] = "table"
        for (topic, group), offsets in f.layout.consumer_offsets.items():
            for qid, off in offsets.items():
                seen = mine.setdefault((topic, group, qid), {})
                seen[off] = "table,view" if seen.get(off) == "table" else "view"
    return out


def consumer_lag(ref_name: str, meta: dict[str, ReplicaMetadata], facts: dict[str, ReplicaFacts],
                 queues: list[dict]) -> list[dict]:
    """Per (group, topic, queue) of the reference: committed offset (its consumer table over the
    whole log; the view's where the table has none), the queue's max offset, lag = max -
    committed. Sorted by group, topic, queue."""
    qmax = {(q["topic"], q["queue_id"]): q["max_offset"] for q in queues if q["replica"] == ref_name}
    rows: dict[tuple[str, str, int], tuple[int, str]] = {}
    if ref_name in meta:
        for (group, topic, qid), off in committed(meta[ref_name].consumers.state).items():
            rows[(group, topic, qid)] = (off, "table")
    for (topic, group), offsets in facts[ref_name].layout.consumer_offsets.items():
        for qid, off in offsets.items():
            rows.setdefault((group, topic, qid), (off, "view"))
    out = []
    for (group, topic, qid), (off, source) in sorted(rows.items()):
        top = qmax.get((topic, qid), 0)
        out.append({"group": group, "topic": topic, "queue_id": qid, "committed": off,
                    "max_offset": top, "lag": top - off, "source": source})
    return out


def group_lag(rows: list[dict]) -> list[dict]:
    """Per group: total lag, queues, topics (from consumer_lag rows), sorted by group."""
    groups: dict[str, dict] = {}
    for r in rows:
        g = groups.setdefault(r["group"], {"group": r["group"], "lag": 0, "queues": 0, "topics": []})
        g["lag"] += r["lag"]
        g["queues"] += 1
        if r["topic"] not in g["topics"]:
            g["topics"].append(r["topic"])
    return [groups[k] for k in sorted(groups)]


def summary(meta: dict[str, ReplicaMetadata], facts: dict[str, ReplicaFacts],
            ref_name: str | None = None) -> dict:
    """What the report shows of each replica's metadata; with `ref_name`, also the reference's
    topic table over its whole log (`reference_table`: what the group's master serves and
    registers with the controller's route registry; cluster.audit.groups compares it)."""
    bound = group_bound(facts)
    out: dict[str, Any] = {"bound": bound}
    if ref_name is not None and ref_name in meta:
        st = meta[ref_name].topics.state
        out["reference_table"] = {"replica": ref_name, "data_version": list(st.data_version),
                                  "complete": meta[ref_name].topics.error is None,
                                  "topics": {c.topic_name: c.to_json() for c in st.all()}}
    return {**out, "replicas": {name: {
        "topic_table_records": m.records[TOPIC_TABLE_TOPIC],
        "consumer_state_records": m.records[STATE_TOPIC],
        "topics": len(m.topics.state.topics), "topics_at_bound": len(m.topics_at_bound.state.topics),
        "consumer_groups": len(m.consumers.state.groups),
        "consumer_queues": len(m.consumers.state.queues)} for name, m in meta.items()}}


def audit(facts: dict[str, ReplicaFacts], ref_name: str, events: dict[str, dict[str, list[TableEvent]]],
          counts: dict[str, dict[str, int]], holding: dict[tuple[str, str, int], tuple[int, int]],
          queues: list[dict], from_snapshot: bool) -> tuple[list[dict], list[dict], dict]:
    """(findings, consumer lag rows of the reference, metadata summary): everything the
    metadata adds to an audit, from the scan's table events and queue facts."""
    meta = replay_replicas(facts, events, counts, from_snapshot)
    qmap = {(q["replica"], q["topic"], q["queue_id"]): (q["min_offset"], q["max_offset"]) for q in queues}
    found = (findings(facts, ref_name, meta, holding, queues)
             + consumer_offset_findings(facts, ref_name, qmap, consumer_offsets(facts, meta)))
    return found, consumer_lag(ref_name, meta, facts, queues), summary(meta, facts, ref_name)

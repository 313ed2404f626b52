"""The same audit in plain Python, for small stores: the oracle of the Spark checks in tests.

It decodes every record and unit in this process with the executor functions (record rows of
cluster.audit.scan, units of cluster.audit.scan_cq: no digests, no buckets, no executor-side
queue checks) and applies the rules of cluster.audit.model with dictionaries. The records of the
table topics are decoded again whole with store.codec and replayed from the first one
(cluster.audit.metadata, from_snapshot=False).
"""
from __future__ import annotations

import json
from collections import defaultdict
from typing import NamedTuple

from store import codec

from cluster.audit import metadata, replica_files
from cluster.audit import model
from cluster.audit.model import ERROR, INFO, AuditResult, dispatchable, finding, severity
from cluster.audit.scan import (CORRUPT, END, OK, RECORD_COLUMNS, RESPLIT, TABLE_DELETE, TABLE_OTHER,
                                TABLE_SNAPSHOT, TABLE_TOPICS, plan_commitlog_tasks, record_rows)
from cluster.audit.scan_cq import CQ_COLUMNS, STATS, plan_cq_tasks, summarize_cq, unit_rows

Rec = NamedTuple("Rec", [(n, object) for n, _ in RECORD_COLUMNS])
Unit = NamedTuple("Unit", [(n, object) for n, _ in CQ_COLUMNS])
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


def scan_replica(lay: replica_files.ReplicaLayout, split_bytes: int) -> tuple[list[Rec], list[Rec], int]:
    """(record rows, end rows, files scanned again whole) of one replica."""
    tasks = plan_commitlog_tasks(lay.name, lay.commitlog, replica_files.split_points(lay, split_bytes))
    rows = [Rec(*r) for t in tasks for r in record_rows(t)]
    bad = {r.file_base for r in rows if r.kind == RESPLIT}
    if bad:
        again = plan_commitlog_tasks(lay.name, [f for f in lay.commitlog if f.base in bad], {})
        rows = [r for r in rows if r.file_base not in bad] + [Rec(*r) for t in again
                                                              for r in record_rows(t)]
    return rows, [r for r in rows if r.kind == END], len(bad)


def audit(layouts: list[replica_files.ReplicaLayout], *, split_bytes: int = 256 << 20,
          reference: str | None = None, max_examples: int = 20) -> AuditResult:
    facts: dict[str, model.ReplicaFacts] = {}
    recs: dict[str, dict[int, Rec]] = {}
    units: list[Unit] = []
    stats_rows = []
    resplit = 0
    for lay in layouts:
        rows, ends, n = scan_replica(lay, split_bytes)
        resplit += n
        f = facts[lay.name] = model.base_facts(lay, [(e.file_base, e.a1 - e.file_base, e.phys,
                                                      e.topic, e.reason, e.a2) for e in ends])
        kept = {}
        for r in rows:
            if r.kind in (OK, CORRUPT) and not any(a < r.phys < b for a, b in f.cuts):
                kept[r.phys] = r
        recs[lay.name] = kept
        for t in plan_cq_tasks(lay.name, lay.cq_files, lay.min_offset):
            stats_rows += [Unit(*r) for r in summarize_cq(t, None) if r[3] == STATS]
            units += [Unit(*r) for r in unit_rows(t, 1 << 62)]
    ref_name = model.finish(facts, reference)
    findings = (_compare(facts, recs, ref_name) + _cq_checks(facts, recs, units) + _unverified(facts, units)
                + _queue_gaps(facts, recs) + _duplicates(recs))
    examples, counts = model.aggregate(findings, max_examples)
    queues = model.queue_table([(s.replica, s.topic, s.queue_id, s.queue_offset, s.a1, s.a2, s.a3, s.a4)
                                for s in stats_rows])
    result = AuditResult(ref_name, facts, examples, counts, queues,
                         scan={"records": sum(f.records + f.corrupt for f in facts.values()),
                               "resplit_files": resplit})
    events = {lay.name: _table_events(lay, recs[lay.name]) for lay in layouts}
    counts = {name: {t: len(evs) for t, evs in tables.items()} for name, tables in events.items()}
    meta_findings, result.consumers, result.metadata = metadata.audit(
        facts, ref_name, events, counts, _holding(recs), queues, from_snapshot=False)
    driver = model.epoch_findings(facts, ref_name) + meta_findings
    return model.finish_result(result, driver, max_examples)


def _table_events(lay: replica_files.ReplicaLayout, rows: dict[int, Rec]) -> dict[str, list]:
    """Every valid record of a table topic, decoded whole again (body included)."""
    paths = {f.base: f.path for f in lay.commitlog}
    out: dict[str, list] = {}
    for phys in sorted(rows):
        r = rows[phys]
        if r.kind != OK or r.topic not in TABLE_TOPICS:
            continue
        with open(paths[r.file_base], "rb") as fh:
            fh.seek(phys - r.file_base)
            rec = codec.decode(fh.read(r.size))
        assert isinstance(rec, codec.MessageRecord), rec
        try:
            kind = json.loads(rec.body).get("kind")
        except (ValueError, AttributeError):
            kind = None
        mark = TABLE_SNAPSHOT if kind == "snapshot" else TABLE_DELETE if kind == "delete" else TABLE_OTHER
        out.setdefault(r.topic, []).append(metadata.TableEvent(phys, mark, rec.body))
    return out


def _holding(recs) -> dict[tuple[str, str, int], tuple[int, int]]:
    out: dict[tuple[str, str, int], tuple[int, int]] = {}
    for name, rows in recs.items():
        for r in rows.values():
            if r.kind == OK and dispatchable(r.sys_flag):
                key = (name, r.topic, r.queue_id)
                first, last = out.get(key, (r.phys, r.queue_offset))
                out[key] = (min(first, r.phys), max(last, r.queue_offset))
    return out


def _same(r: Rec, g: Rec | None) -> bool:
    return (g is not None and r.kind == g.kind and r.size == g.size and r.rec_crc == g.rec_crc
            and r.uniq_key == g.uniq_key)


def _compare(facts, recs, ref_name) -> list[dict]:
    ref, ref_rows = facts[ref_name], recs[ref_name]
    out = []
    for name, f in facts.items():
        mine = recs[name]
        if f.reference:
            for r in mine.values():
                if r.kind == CORRUPT:
                    out.append(finding(name, "corrupt_record", severity(r.phys, f.bound), r.phys,
                                       r.topic, r.queue_id, r.queue_offset, size=r.size, reason=r.reason))
            continue
        tails: dict[tuple, list] = {}
        for phys in sorted(mine):
            r, g = mine[phys], ref_rows.get(phys)
            if phys < f.lo or _same(r, g):
                continue
            sev = severity(phys, f.bound)
            if phys >= f.consistent_point:
                t = tails.setdefault((f.epoch_at(phys), sev), [0, 0, phys, 0])
                t[0] += 1
                t[1] += r.size or 0
                t[3] = max(t[3], phys + (r.size or 0))
                continue
            common = dict(size=r.size, record_crc=r.rec_crc, uniq_key=r.uniq_key,
                          record_kind=r.kind, reason=r.reason)
            if g is not None:
                diff = ",".join(n for n, a, b in (("kind", r.kind, g.kind), ("size", r.size, g.size),
                                                  ("record_crc", r.rec_crc, g.rec_crc),
                                                  ("uniq_key", r.uniq_key, g.uniq_key)) if a != b)
                out.append(finding(name, "record_mismatch", sev, phys, r.topic, r.queue_id,
                                   r.queue_offset, **common, reference_size=g.size,
                                   reference_record_crc=g.rec_crc, reference_uniq_key=g.uniq_key,
                                   reference_kind=g.kind, fields=diff))
            else:
                fs = ref.files.get(r.file_base)
                kind = "gap" if fs is None or phys >= fs.stop else "misaligned"
                out.append(finding(name, kind, sev, phys, r.topic, r.queue_id, r.queue_offset,
                                   **common, reference_file_stop=fs.stop if fs else None))
        for (epoch, sev), (n, size, first, end) in tails.items():
            out.append(finding(name, "diverged_tail", sev, first, epoch=epoch, records=n,
                               bytes=size, end=end))
        missing: dict[tuple, list] = {}
        for phys, g in ref_rows.items():
            if g.kind == OK and f.lo <= phys < f.consistent_point and phys not in mine:
                m = missing.setdefault((g.file_base, severity(phys, f.bound)), [0, 0, phys, 0])
                m[0] += 1
                m[1] += g.size
                m[2] = min(m[2], phys)
                m[3] = max(m[3], phys + g.size)
        for (base, sev), (n, size, first, end) in missing.items():
            out.append(finding(name, "missing_records", sev, first, file_base=base, records=n,
                               bytes=size, end=end))
    return out


def _unit_state(f: model.ReplicaFacts, phys: int) -> str | None:
    if phys < f.layout.min_offset:
        return "expired"
    if any(a <= phys < b for a, b in f.holes):
        return "unverified"
    return None


def _unverified(facts, units: list[Unit]) -> list[dict]:
    groups: dict[tuple, list] = {}
    for u in units:
        if _unit_state(facts[u.replica], u.phys) == "unverified":
            g = groups.setdefault((u.replica, u.topic, u.queue_id), [0, 0, u.phys, 0])
            g[0] += 1
            g[1] += u.size
            g[2] = min(g[2], u.phys)
            g[3] = max(g[3], u.phys + u.size)
    return [finding(rep, "cq_unverified", INFO, first, topic, qid, units=n, bytes=size, end=end)
            for (rep, topic, qid), (n, size, first, end) in groups.items()]


def _cq_checks(facts, recs, units: list[Unit]) -> list[dict]:
    out = []
    pointed = {(u.replica, u.phys) for u in units}
    for u in units:
        f = facts[u.replica]
        if _unit_state(f, u.phys):
            continue
        r = recs[u.replica].get(u.phys)
        if r is None:
            problem = "no record at this offset"
        elif r.kind == CORRUPT:
            problem = "points at a corrupt record"
        else:
            diff = [n for n, a, b in (("topic", u.topic, r.topic), ("queue_id", u.queue_id, r.queue_id),
                                      ("queue_offset", u.queue_offset, r.queue_offset),
                                      ("size", u.size, r.size)) if a != b]
            if u.topic != SCHEDULE_TOPIC and u.tag_hash != r.tag_hash:
                diff.append("tag_hash")
            if not diff:
                continue
            problem = "mismatch: " + ",".join(diff)
        out.append(finding(u.replica, "cq_bad_entry", ERROR, u.phys, u.topic, u.queue_id,
                           u.queue_offset, problem=problem, entry_size=u.size,
                           entry_tag_hash=u.tag_hash, record_kind=r and r.kind,
                           record_topic=r and r.topic, record_queue_id=r and r.queue_id,
                           record_queue_offset=r and r.queue_offset, record_size=r and r.size,
                           record_tag_hash=r and r.tag_hash))
    for name, rows in recs.items():
        confirm = facts[name].layout.confirm_offset
        for r in rows.values():
            if (r.kind == OK and r.phys < confirm and dispatchable(r.sys_flag)
                    and (name, r.phys) not in pointed):
                out.append(finding(name, "cq_missing_entry", ERROR, r.phys, r.topic, r.queue_id,
                                   r.queue_offset, size=r.size))
    return out


def _queue_gaps(facts, recs) -> list[dict]:
    out = []
    for name, rows in recs.items():
        holes = facts[name].holes
        queues: dict[tuple, list[Rec]] = defaultdict(list)
        for r in rows.values():
            if r.kind == OK and dispatchable(r.sys_flag):
                queues[(r.topic, r.queue_id)].append(r)
        for (topic, qid), q in queues.items():
            q.sort(key=lambda r: r.phys)
            for prev, r in zip(q, q[1:]):
                seg_prev = sum(1 for a, _ in holes if a <= prev.phys)
                seg = sum(1 for a, _ in holes if a <= r.phys)
                if seg == seg_prev and r.queue_offset != prev.queue_offset + 1:
                    out.append(finding(name, "queue_offset_gap", ERROR, r.phys, topic, qid,
                                       r.queue_offset, previous_queue_offset=prev.queue_offset,
                                       previous_offset=prev.phys))
    return out


def _duplicates(recs) -> list[dict]:
    out = []
    for name, rows in recs.items():
        groups: dict[tuple, list[Rec]] = defaultdict(list)
        for r in rows.values():
            if r.kind == OK and r.uniq_key is not None and dispatchable(r.sys_flag):
                groups[(r.topic, r.queue_id, r.uniq_key)].append(r)
        for (topic, qid, key), g in groups.items():
            if len(g) > 1:
                offsets = sorted(r.phys for r in g)
                qos = sorted(r.queue_offset for r in g)
                out.append(finding(name, "duplicate_key", INFO, offsets[0], topic, qid, qos[0],
                                   uniq_key=key, count=len(g), offsets=offsets[:5],
                                   queue_offsets=qos[:5]))
    return out

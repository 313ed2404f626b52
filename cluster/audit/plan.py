"""Driver side: from the collected bucket digests, which buckets need record rows (pass 2).

A bucket is compared record by record only when the digests say something differs there:
* `cmp_dirty` (replica, bucket): the replica's records differ from the reference's (count or
  XOR of digest.record_hash), skipping buckets wholly below the compared range and buckets the
  replica has no record in that lie at or above its consistent point (plain lag: nothing to
  report there);
* `cq_dirty` replica -> buckets: the replica's dispatchable records and its live units
  disagree (count or XOR of digest.cq_hash), skipping buckets at or above its confirm offset
  that no unit points into (records not dispatched yet: nothing to report there).
Pass 2 decodes, per dirty bucket and commitlog file, from the bucket's first record (known from
pass 1, so always a record boundary) to the bucket's end; for a compared bucket the reference's
records too. Duplicate-key candidates outside those buckets are decoded one record each.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from cluster.audit.replica_files import ReplicaLayout
from cluster.audit.model import ReplicaFacts
from cluster.audit.scan import CommitLogTask


@dataclass
class DetailPlan:
    """What pass 2 of the audit reads again: the buckets whose digests differ (commitlog
    and consume queue), the commitlog ranges to decode record by record, and the offsets
    of duplicate-key candidates."""

    bucket_bytes: int
    cmp_dirty: set[tuple[str, int]] = field(default_factory=set)
    cq_dirty: dict[str, set[int]] = field(default_factory=dict)
    record_tasks: list[CommitLogTask] = field(default_factory=list)
    dup_offsets: set[tuple[str, int]] = field(default_factory=set)

    @property
    def empty(self) -> bool:
        return not self.record_tasks

    def summary(self) -> dict:
        return {"bucket_bytes": self.bucket_bytes, "compared_buckets": len(self.cmp_dirty),
                "cq_buckets": sum(len(b) for b in self.cq_dirty.values()),
                "detail_ranges": len(self.record_tasks), "duplicate_candidates": len(self.dup_offsets)}


def plan_details(layouts: list[ReplicaLayout], facts: dict[str, ReplicaFacts], ref: str,
                 bucket_bytes: int, rec_digests: list[tuple], unit_digests: list[tuple],
                 dup_candidates: list[tuple[str, int]]) -> DetailPlan:
    """rec_digests: (replica, file_base, bucket, records, xor, cq_records, cq_xor, first offset);
    unit_digests: (replica, bucket, units, xor); dup_candidates: (replica, offset)."""
    B = bucket_bytes
    rec: dict[tuple[str, int], list[int]] = {}
    firsts: dict[tuple[str, int], dict[int, int]] = {}  # -> {file base: first record}
    for rep, base, b, n, x, cn, cx, first in rec_digests:
        d = rec.setdefault((rep, b), [0, 0, 0, 0])
        d[0] += n
        d[1] ^= x
        d[2] += cn
        d[3] ^= cx
        per_file = firsts.setdefault((rep, b), {})
        per_file[base] = min(first, per_file.get(base, first))
    plan = DetailPlan(B)
    for name, f in facts.items():
        if name == ref:
            continue
        for b in sorted({b for (r, b) in rec if r in (name, ref)}):
            if (b + 1) * B <= f.lo:
                continue
            mine, theirs = rec.get((name, b)), rec.get((ref, b))
            if (mine or [0, 0])[:2] == (theirs or [0, 0])[:2]:
                continue
            if mine is None and b * B >= f.consistent_point:
                continue
            plan.cmp_dirty.add((name, b))
    detail = set(plan.cmp_dirty) | {(ref, b) for _, b in plan.cmp_dirty}
    units: dict[tuple[str, int], list[int]] = {}
    for rep, b, n, x in unit_digests:
        d = units.setdefault((rep, b), [0, 0])
        d[0] += n
        d[1] ^= x
    for key in sorted(set(units) | set(rec)):
        name, b = key
        r, u = (rec.get(key) or [0, 0, 0, 0])[2:], units.get(key) or [0, 0]
        if r == u or (key not in units and b * B >= facts[name].layout.confirm_offset):
            continue
        plan.cq_dirty.setdefault(name, set()).add(b)
        detail.add(key)
    by_name = {lay.name: lay for lay in layouts}
    for rep, b in sorted(detail):
        for base, first in sorted(firsts.get((rep, b), {}).items()):
            f = _file(by_name[rep], base)
            plan.record_tasks.append(CommitLogTask(rep, f.path, base, first - base,
                                                   min((b + 1) * B - base, f.size), f.size))
    for rep, phys in sorted(set(dup_candidates)):
        plan.dup_offsets.add((rep, phys))
        if (rep, phys // B) in detail:
            continue
        f = _file_at(by_name[rep], phys)
        plan.record_tasks.append(CommitLogTask(rep, f.path, f.base, phys - f.base, phys - f.base + 1, f.size))
    return plan


def _file(lay: ReplicaLayout, base: int):
    return next(f for f in lay.commitlog if f.base == base)


def _file_at(lay: ReplicaLayout, offset: int):
    i = bisect.bisect_right([f.base for f in lay.commitlog], offset) - 1
    return lay.commitlog[i]

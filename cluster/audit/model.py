"""Driver-side facts and rules shared by the Spark checks and the plain-Python reference.

From the commitlog tasks' end rows alone this derives, per replica: where each file's scan
stopped, the record count and bytes, the valid end (end of the contiguous valid prefix), the end
of the last valid record (`max_end`), the unscanned holes below it; then the reference replica,
the consistent point with the reference (ha.epoch.find_consistent_point, with each side's
max_end) and the confirm bound (min of the replica's and the reference's confirm offsets).
Findings are dicts (see `finding`); both implementations cap and count them with `aggregate`.

Severity rules: a record-level disagreement with the reference is an `error` when the record
starts below the confirm bound and a `warning` above it; every consume-queue problem is an
`error`; duplicates and expired consumer offsets are `info`. The metadata findings (routes,
topic tables, committed offsets) and their severities are in cluster.audit.metadata.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ha.epoch import EpochCache, EpochEntry, find_consistent_point

from cluster.audit.replica_files import ReplicaLayout
from cluster.audit.scan import DATA_STOPS

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)
KINDS = ("record_mismatch", "misaligned", "gap", "missing_records", "diverged_tail",
         "corrupt_record", "no_common_epoch", "cq_bad_entry", "cq_missing_entry",
         "queue_offset_gap", "consumer_offset_ahead", "consumer_offset_expired", "duplicate_key",
         "cq_unverified", "unroutable_queue", "topic_table_mismatch", "consumer_offset_mismatch",
         "table_record_bad")


class UnknownReference(ValueError):
    """--reference names no replica."""


@dataclass
class FileStop:
    base: int
    end: int  # file end offset
    stop: int  # offset where the file's data ends (first real stop), or the file end
    kind: str  # END / BLANK / EMPTY / CORRUPT / NEED_MORE
    reason: str


@dataclass
class ReplicaFacts:
    """One replica as the audit judges it after pass 1: where each file's data stops, the
    contiguous valid end and why, the holes, record counts, and against the reference its
    consistent point, confirm bound and the first offset compared."""

    layout: ReplicaLayout
    files: dict[int, FileStop]
    valid_end: int
    valid_end_stop: str  # why the contiguous prefix ends there
    cuts: list[tuple[int, int]]  # rows with stop < phys < end are dropped (later tasks of a file)
    raw_holes: list[tuple[int, int]]  # [a, b): regions not scanned
    records: int
    corrupt: int
    bytes: int
    max_end: int  # end of the last valid record (min_offset when there is none)
    holes: list[tuple[int, int]]  # the raw holes below max_end
    reference: bool = False
    consistent_point: int | None = None  # None for the reference
    no_common_epoch: bool = False
    bound: int = 0  # confirm bound: below it a disagreement is an error
    lo: int = 0  # first offset compared with the reference

    @property
    def name(self) -> str:
        return self.layout.name

    def epoch_at(self, offset: int) -> int:
        epoch = 0
        for e, start in self.layout.epochs:
            if start <= offset:
                epoch = e
        return epoch


def _kept_tasks(layout: ReplicaLayout, ends: list[tuple]) -> dict[int, list[tuple]]:
    """ends: (file_base, task_start, stop_offset, stop_kind, reason, records) of each task of
    the replica. Per file, its tasks in order up to the first that stopped inside the data (the
    scan of a file ends there; rows of later tasks of the file are cut)."""
    by_file: dict[int, list[tuple]] = {}
    for e in sorted(ends, key=lambda e: (e[0], e[1])):
        tasks = by_file.setdefault(e[0], [])
        if not tasks or tasks[-1][3] not in DATA_STOPS:
            tasks.append(e)
    return by_file


def base_facts(layout: ReplicaLayout, ends: list[tuple]) -> ReplicaFacts:
    """Facts of one replica from its tasks' end rows alone."""
    kept = _kept_tasks(layout, ends)
    stops = {}
    records = corrupt = nbytes = 0
    max_end = None
    for f in layout.commitlog:
        stop = FileStop(f.base, f.end, f.end, "END", "end of file")
        for _, start, offset, kind, reason, count in kept.get(f.base, ()):
            records += count
            nbytes += offset - (f.base + start)  # a task's records are contiguous up to its stop
            corrupt += kind in ("CORRUPT", "NEED_MORE")
            if count:
                max_end = offset if max_end is None else max(max_end, offset)
            if kind in DATA_STOPS:
                stop = FileStop(f.base, f.end, offset, kind, reason)
        stops[f.base] = stop
    valid_end, why = layout.min_offset, "no commitlog files"
    holes: list[tuple[int, int]] = []
    cuts: list[tuple[int, int]] = []
    expected = layout.min_offset
    contiguous = True
    for f in layout.commitlog:
        s = stops[f.base]
        if f.base != expected:
            holes.append((expected, f.base))
            if contiguous:
                valid_end, why, contiguous = expected, f"no commitlog file at {expected}", False
        if s.kind in ("EMPTY", "CORRUPT", "NEED_MORE"):
            cuts.append((s.stop, f.end))
            holes.append((s.stop if s.kind == "EMPTY" else s.stop + 1, f.end))
            if contiguous:
                valid_end, why, contiguous = s.stop, f"{s.kind}: {s.reason}", False
        expected = f.end
    if contiguous and layout.commitlog:
        valid_end, why = expected, "end of the last file"
    max_end = layout.min_offset if max_end is None else max_end
    return ReplicaFacts(layout, stops, valid_end, why, cuts, holes, records, corrupt, nbytes,
                        max_end, [(a, b) for a, b in holes if a < max_end])


def choose_reference(facts: dict[str, ReplicaFacts], wanted: str | None) -> str:
    """The replica with the highest last epoch; ties -> the largest valid end, then the first."""
    if wanted is not None:
        if wanted not in facts:
            raise UnknownReference(f"--reference {wanted!r} is not one of {sorted(facts)}")
        return wanted
    best = None
    for name, f in facts.items():
        key = (f.layout.last_epoch, f.valid_end)
        if best is None or key > best[0]:
            best = (key, name)
    return best[1]


def finish(facts: dict[str, ReplicaFacts], wanted_reference: str | None) -> str:
    """Fill everything that depends on the reference. Returns the reference's name."""
    ref_name = choose_reference(facts, wanted_reference)
    ref = facts[ref_name]
    ref_epochs = EpochCache(EpochEntry(e, s) for e, s in ref.layout.epochs)
    for name, f in facts.items():
        f.reference = name == ref_name
        f.lo = max(f.layout.min_offset, ref.layout.min_offset)
        if f.reference:
            f.bound = ref.layout.confirm_offset
            continue
        f.bound = min(f.layout.confirm_offset, ref.layout.confirm_offset)
        mine = EpochCache(EpochEntry(e, s) for e, s in f.layout.epochs)
        point = find_consistent_point(mine, f.max_end, ref_epochs, ref.max_end)
        if point is None:
            if not f.layout.epochs and not ref.layout.epochs:
                point = min(f.max_end, ref.max_end)
            else:
                point, f.no_common_epoch = f.lo, True
        f.consistent_point = max(point, f.lo)
    return ref_name


def severity(offset: int, bound: int) -> str:
    return ERROR if offset < bound else WARNING


def finding(replica: str, kind: str, sev: str, offset=None, topic=None, queue_id=None,
            queue_offset=None, **details) -> dict:
    return {"replica": replica, "kind": kind, "severity": sev, "offset": offset, "topic": topic,
            "queue_id": queue_id, "queue_offset": queue_offset,
            "details": {k: v for k, v in details.items() if v is not None}}


def sort_key(f: dict) -> tuple:
    return (f["replica"], f["kind"], f["severity"], -1 if f["offset"] is None else f["offset"],
            f["topic"] or "", -1 if f["queue_id"] is None else f["queue_id"],
            -1 if f["queue_offset"] is None else f["queue_offset"])


def aggregate(findings: list[dict], max_examples: int) -> tuple[list[dict], dict]:
    """(the first max_examples findings of each (replica, kind, severity) in sort_key order,
    {(replica, kind, severity): count})."""
    counts: dict[tuple[str, str, str], int] = {}
    examples = []
    for f in sorted(findings, key=sort_key):
        key = (f["replica"], f["kind"], f["severity"])
        counts[key] = counts.get(key, 0) + 1
        if counts[key] <= max_examples:
            examples.append(f)
    return examples, counts


# -- driver-side checks (same code for Spark and the reference) -----------------------------------
def epoch_findings(facts: dict[str, ReplicaFacts], ref_name: str) -> list[dict]:
    ref = facts[ref_name]
    return [finding(f.name, "no_common_epoch", WARNING, epochs=[list(e) for e in f.layout.epochs],
                    reference_epochs=[list(e) for e in ref.layout.epochs])
            for f in facts.values() if f.no_common_epoch]


def enrich(examples: list[dict], facts: dict[str, ReplicaFacts], ref_name: str) -> None:
    """Add what only the driver knows to collected findings: the reference's epoch at the
    start of a diverged tail, and the consistent point."""
    ref = facts[ref_name]
    for f in examples:
        if f["kind"] == "diverged_tail":
            first = f["offset"]
            f["details"]["consistent_point"] = facts[f["replica"]].consistent_point
            if first < ref.max_end:
                f["details"]["reference_epoch"] = ref.epoch_at(first)


def consumer_offset_findings(facts: dict[str, ReplicaFacts], ref_name: str,
                             queues: dict[tuple[str, str, int], tuple[int, int]],
                             offsets: dict[str, dict[tuple[str, str, int], dict[int, str]]] | None = None
                             ) -> list[dict]:
    """queues: {(replica, topic, queue_id): (min_offset, max_offset)}; offsets: {replica:
    {(topic, group, queue_id): {offset: source}}} (cluster.audit.metadata.consumer_offsets: the
    consumer table's committed offsets and the config/consumerOffset.json view; default: the
    view alone). An offset past the replica's queue end is an error when it is past the
    reference's end too, else a warning (the replica lags); one below the queue's min offset is
    info (messages expired)."""
    if offsets is None:
        offsets = {name: {(topic, group, qid): {off: "view"}
                          for (topic, group), table in f.layout.consumer_offsets.items()
                          for qid, off in table.items()} for name, f in facts.items()}
    out = []
    for name in facts:
        for (topic, group, qid), seen in sorted(offsets.get(name, {}).items()):
            for off, source in sorted(seen.items()):
                qmin, qmax = queues.get((name, topic, qid), (0, 0))
                ref_max = queues.get((ref_name, topic, qid), (0, 0))[1]
                if off > qmax:
                    out.append(finding(name, "consumer_offset_ahead",
                                       ERROR if off > ref_max else WARNING, None, topic, qid, off,
                                       group=group, queue_min=qmin, queue_max=qmax,
                                       reference_queue_max=ref_max, source=source))
                elif off < qmin:
                    out.append(finding(name, "consumer_offset_expired", INFO, None, topic, qid,
                                       off, group=group, queue_min=qmin, queue_max=qmax,
                                       source=source))
    return out


def replica_summary(f: ReplicaFacts, ref: ReplicaFacts, cq: dict) -> dict:
    lay = f.layout
    return {"name": f.name, "reference": f.reference, "root": lay.root,
            "min_offset": lay.min_offset, "files_end": lay.files_end, "valid_end": f.valid_end,
            "valid_end_reason": f.valid_end_stop, "max_end": f.max_end,
            "confirm_offset": lay.confirm_offset, "confirm_bound": f.bound,
            "epochs": [list(e) for e in lay.epochs], "last_epoch": lay.last_epoch,
            "consistent_point": f.consistent_point, "lag_bytes": ref.valid_end - f.valid_end,
            "records": f.records, "corrupt_records": f.corrupt, "record_bytes": f.bytes,
            "commitlog_files": len(lay.commitlog),
            "holes": [list(h) for h in f.holes],
            "file_stops": [{"file_base": s.base, "stop": s.stop, "kind": s.kind}
                           for s in f.files.values() if s.kind not in ("END", "BLANK")],
            **cq}


@dataclass
class AuditResult:
    """What both implementations return; report.py turns it into JSON, text and a chart."""

    reference: str
    facts: dict[str, ReplicaFacts]
    examples: list[dict]  # findings, capped per (replica, kind, severity)
    counts: dict[tuple[str, str, str], int]
    queues: list[dict]  # queue_table()
    replicas: list[dict] = field(default_factory=list)  # replica_summary of each
    consumers: list[dict] = field(default_factory=list)  # metadata.consumer_lag of the reference
    metadata: dict = field(default_factory=dict)  # metadata.summary
    scan: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return sum(n for (_, _, sev), n in self.counts.items() if sev == ERROR)


def dispatchable(sys_flag: int) -> bool:
    """Prepared and rollback transaction records never enter consume queues (store.codec.dispatch)."""
    return (sys_flag & 0xC) not in (0x4, 0xC)


def queue_table(stats: list[tuple]) -> list[dict]:
    """stats: consume-queue `stats` rows as (replica, topic, queue_id, end_index, units,
    fillers, expired, first_live). min_offset: the first unit still in the commitlog (RocketMQ's
    minOffsetInQueue), else max_offset; max_offset: the index after the last written unit."""
    table: dict[tuple, dict] = {}
    for rep, topic, qid, end, n, fillers, expired, live in stats:
        q = table.setdefault((rep, topic, qid), {"replica": rep, "topic": topic, "queue_id": qid,
                                                 "min_offset": None, "max_offset": 0,
                                                 "entries": 0, "fillers": 0, "expired": 0})
        q["max_offset"] = max(q["max_offset"], end)
        q["entries"] += n
        q["fillers"] += fillers
        q["expired"] += expired
        if live is not None and (q["min_offset"] is None or live < q["min_offset"]):
            q["min_offset"] = live
    for q in table.values():
        if q["min_offset"] is None:
            q["min_offset"] = q["max_offset"]
    return [table[k] for k in sorted(table)]


def cq_counts(queues: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for q in queues:
        d = out.setdefault(q["replica"], {"cq_entries": 0, "cq_fillers": 0, "cq_expired": 0})
        d["cq_entries"] += q["entries"]
        d["cq_fillers"] += q["fillers"]
        d["cq_expired"] += q["expired"]
    return out


def finish_result(result: AuditResult, driver_findings: list[dict], max_examples: int) -> AuditResult:
    """Merge the driver-side findings into the collected ones, enrich, build the summaries."""
    extra, extra_counts = aggregate(driver_findings, max_examples)
    result.examples = sorted(result.examples + extra, key=sort_key)
    for k, n in extra_counts.items():
        result.counts[k] = result.counts.get(k, 0) + n
    enrich(result.examples, result.facts, result.reference)
    ref = result.facts[result.reference]
    counts = cq_counts(result.queues)
    result.replicas = [replica_summary(f, ref, counts.get(name, {"cq_entries": 0, "cq_fillers": 0,
                                                                  "cq_expired": 0}))
                       for name, f in result.facts.items()]
    return result

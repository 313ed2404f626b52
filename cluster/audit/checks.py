"""The checks as Spark DataFrame logic (cluster.audit.reference is the same in plain Python).

Inputs: `summary` (pass-1 rows of every task: digests, queue edges and gaps, key hashes,
corrupt records), `cq_summary` (consume-queue stats and unit digests), and after planning
(cluster.audit.plan) `recs`/`units`, the record and unit rows of the dirty buckets only.

* digests: summed/XORed per (replica, bucket) and collected: they decide the dirty buckets;
* duplicate candidates: the key hashes of each queue gathered into one array, checked with
  array_distinct; only queues with a repeated hash are exploded;
* record rows of a compared bucket full-outer-joined with the reference's on (replica, phys):
  mismatches, misaligned/gap records, diverged tails, missing records;
* record rows of a consume-queue bucket full-outer-joined with its units on (replica, phys):
  entries pointing at missing/corrupt/other records, records no entry points at;
* queue offsets: gaps found inside tasks plus a window over the tasks' first/last per queue;
* the findings ranked per (replica, kind, severity): only the first examples and the counts
  reach the driver;
* metadata inputs (cluster.audit.metadata replays them on the driver): the table rows from the
  newest snapshot below the group bound on (plus every delete record) and each table's record
  count; the first offset and last queue offset of every queue's commitlog records.
"""
from __future__ import annotations

import json

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from cluster.audit.model import ERROR, INFO, WARNING, ReplicaFacts
from cluster.audit.plan import DetailPlan
from cluster.audit.metadata import TableEvent
from cluster.audit.scan import CORRUPT, DIGEST, KEYS, OK, QEDGE, QGAP, TABLE, TABLE_DELETE, TABLE_SNAPSHOT
from cluster.audit.scan_cq import UDIGEST

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
KEYS_ = ["replica", "phys"]
c = F.col


def _by_replica(values: dict[str, int | None]) -> Column:
    expr = F.lit(None).cast("bigint")
    for name, v in values.items():
        expr = F.when(c("replica") == name, F.lit(v).cast("bigint")).otherwise(expr)
    return expr


def _in_holes(facts: dict[str, ReplicaFacts], col: str = "phys") -> Column:
    expr = F.lit(False)
    for name, f in facts.items():
        for a, b in f.holes:
            expr = expr | ((c("replica") == name) & (c(col) >= a) & (c(col) < b))
    return expr


def _segment(facts: dict[str, ReplicaFacts], col: str) -> Column:
    expr = F.lit(0)
    for name, f in facts.items():
        for a, _ in f.holes:
            expr = expr + F.when((c("replica") == name) & (c(col) >= a), 1).otherwise(0)
    return expr


def _epoch(facts: dict[str, ReplicaFacts]) -> Column:
    expr = F.lit(0)
    for name, f in facts.items():
        chain = F.lit(0)
        for epoch, start in f.layout.epochs:  # later entries win, as EpochCache.entry_at
            chain = F.when(c("phys") >= start, F.lit(epoch)).otherwise(chain)
        expr = F.when(c("replica") == name, chain).otherwise(expr)
    return expr


def _severity(bound: Column) -> Column:
    return F.when(c("phys") < bound, F.lit(ERROR)).otherwise(F.lit(WARNING))


def _differs(*pairs: tuple[str, Column, Column]) -> list[Column]:
    """The name of each pair whose columns differ (null-safe), else null: for concat_ws."""
    return [F.when(~a.eqNullSafe(b), F.lit(n)) for n, a, b in pairs]


def _findings(df: DataFrame, kind, severity, offset, topic=None, queue_id=None,
              queue_offset=None, **details: Column) -> DataFrame:
    def col(x, typ):
        return (x if isinstance(x, Column) else F.lit(x)).cast(typ)
    return df.select(
        c("replica"), col(kind, "string").alias("kind"), col(severity, "string").alias("severity"),
        col(offset, "bigint").alias("offset"), col(topic, "string").alias("topic"),
        col(queue_id, "int").alias("queue_id"), col(queue_offset, "bigint").alias("queue_offset"),
        F.to_json(F.struct(*[v.alias(k) for k, v in details.items()])).alias("details"))


def _pairs(spark: SparkSession, pairs, names=("replica", "bucket")) -> DataFrame:
    return F.broadcast(spark.createDataFrame(sorted(pairs), f"{names[0]} string, {names[1]} bigint"))


# -- pass 1 --------------------------------------------------------------------------------------
def digests(summary: DataFrame, cq_summary: DataFrame) -> tuple[list[tuple], list[tuple]]:
    """(record side per (replica, file base, bucket): records, XOR, dispatchable records, XOR,
    first offset; unit side per (replica, bucket): units, XOR), in one job."""
    recs = (summary.filter(c("kind") == DIGEST).groupBy("replica", "file_base", c("a1").alias("b"))
            .agg(F.sum("a2").alias("n"), F.bit_xor("a3").alias("x"), F.sum("a4").alias("cn"),
                 F.bit_xor("a5").alias("cx"), F.min("phys").alias("first"))
            .withColumn("side", F.lit("r")))
    units = (cq_summary.filter(c("kind") == UDIGEST).groupBy("replica", c("a1").alias("b"))
             .agg(F.sum("a2").alias("n"), F.bit_xor("a3").alias("x")).withColumn("side", F.lit("u")))
    rows = recs.unionByName(units, allowMissingColumns=True).collect()
    return ([(r.replica, r.file_base, r.b, r.n, r.x, r.cn, r.cx, r.first) for r in rows if r.side == "r"],
            [(r.replica, r.b, r.n, r.x) for r in rows if r.side == "u"])


def dup_candidates(summary: DataFrame) -> list[tuple[str, int]]:
    """(replica, offset) of every record whose key hash repeats in its queue: the hashes of a
    queue are gathered into one array; only arrays with a repeat are sorted to find it."""
    q = (summary.filter(c("kind") == KEYS).groupBy("replica", "topic", "queue_id")
         .agg(F.flatten(F.collect_list("hashes")).alias("h"), F.flatten(F.collect_list("offsets")).alias("o"))
         .filter(F.size(F.array_distinct("h")) < F.size("h"))
         .withColumn("s", F.array_sort("h")))
    at = F.element_at
    repeats = F.filter(F.sequence(F.lit(2), F.size("s")), lambda i: at("s", i) == at("s", i - 1))
    repeated = F.array_distinct(F.transform(repeats, lambda i: at("s", i)))
    pairs = F.filter(F.arrays_zip("h", "o"), lambda z: F.array_contains("d", z["h"]))
    rows = (q.withColumn("d", repeated).select("replica", F.explode(pairs).alias("z"))
            .select("replica", c("z.o").alias("phys")).collect())
    return [(r.replica, r.phys) for r in rows]


def table_events(summary: DataFrame, bound: int) -> tuple[dict, dict]:
    """({replica: {table: records}}, {replica: {table: [TableEvent] in log order}}): the
    events from the newest snapshot below `bound` on (all when there is none), plus every
    delete record (metadata.replay_replicas with from_snapshot=True)."""
    t = summary.filter(c("kind") == TABLE)
    heads = (t.groupBy("replica", "topic")
             .agg(F.count("*").alias("n"),
                  F.max(F.when((c("a1") == TABLE_SNAPSHOT) & (c("phys") < bound), c("phys"))).alias("start"))
             .collect())
    counts: dict[str, dict[str, int]] = {}
    keep = c("a1") == TABLE_DELETE
    for h in heads:
        counts.setdefault(h.replica, {})[h.topic] = h.n
        mine = (c("replica") == h.replica) & (c("topic") == h.topic)
        keep = keep | (mine & (c("phys") >= h.start) if h.start is not None else mine)
    events: dict[str, dict[str, list[TableEvent]]] = {}
    for r in t.filter(keep).select("replica", "topic", "phys", "a1", "reason").collect():
        events.setdefault(r.replica, {}).setdefault(r.topic, []).append(
            TableEvent(r.phys, r.a1, r.reason.encode("utf-8")))
    for tables in events.values():
        for evs in tables.values():
            evs.sort()
    return counts, events


def queue_records(summary: DataFrame) -> dict[tuple[str, str, int], tuple[int, int]]:
    """{(replica, topic, queue_id): (first offset, last queue offset)} of the dispatchable
    valid records of every queue (from the tasks' qedge rows)."""
    rows = (summary.filter(c("kind") == QEDGE).groupBy("replica", "topic", "queue_id")
            .agg(F.min("phys").alias("first"), F.max("a1").alias("last")).collect())
    return {(r.replica, r.topic, r.queue_id): (r.first, r.last) for r in rows}


# -- pass 2 and the findings ---------------------------------------------------------------------
def all_findings(spark: SparkSession, recs: DataFrame, units: DataFrame, summary: DataFrame,
                 facts: dict[str, ReplicaFacts], ref: str, plan: DetailPlan) -> DataFrame:
    B = plan.bucket_bytes
    recs = recs.withColumn("bucket", F.expr(f"phys div {B}"))
    bound = _by_replica({n: f.bound for n, f in facts.items()})
    parts = [_findings(summary.filter((c("replica") == ref) & (c("kind") == CORRUPT)), "corrupt_record",
                       _severity(F.lit(facts[ref].bound)), c("phys"), c("topic"), c("queue_id"),
                       c("queue_offset"), size=c("a1"), reason=c("reason"))]
    aggs = []
    if plan.cmp_dirty:
        others = {n: f for n, f in facts.items() if n != ref}
        cmp, miss = _with_reference(spark, recs, others, ref, plan)
        cp = _by_replica({n: f.consistent_point for n, f in others.items()})
        parts.append(_record_differences(spark, cmp.filter(c("phys") < cp), facts[ref], bound))
        aggs.append(_agg_rows(cmp.filter(c("phys") >= cp), "diverged_tail", _severity(bound),
                              _epoch(others), F.coalesce(c("size"), F.lit(0))))
        aggs.append(_agg_rows(miss, "missing_records", _severity(bound), c("g_base"), c("g_size")))
    if plan.cq_dirty:
        aggs.append(_agg_rows(units.filter(_in_holes(facts)), "cq_unverified", F.lit(INFO), F.lit(None),
                              c("size"), per_queue=True))
        cqd = _pairs(spark, [(n, b) for n, bs in plan.cq_dirty.items() for b in bs])
        parts += _consume_queues(recs.join(cqd, ["replica", "bucket"]), units.filter(~_in_holes(facts)),
                                 facts)
    if aggs:
        agg = aggs[0]
        for a in aggs[1:]:
            agg = agg.unionByName(a)
        agg = (agg.groupBy("replica", "kind", "sev", "key", "a_topic", "a_qid")
               .agg(F.count("*").alias("n"), F.sum("a_size").alias("bytes"), F.min("phys").alias("first"),
                    F.max(c("phys") + c("a_size")).alias("end")))
        unverified = c("kind") == "cq_unverified"
        parts.append(_findings(agg, c("kind"), c("sev"), c("first"), c("a_topic"), c("a_qid"),
                               epoch=F.when(c("kind") == "diverged_tail", c("key")),
                               file_base=F.when(c("kind") == "missing_records", c("key")),
                               records=F.when(~unverified, c("n")), units=F.when(unverified, c("n")),
                               bytes=c("bytes"), end=c("end")))
    parts += _queue_gaps(summary, facts)
    if plan.dup_offsets:
        parts.append(_duplicates(recs.join(_pairs(spark, plan.dup_offsets, ("replica", "phys")), KEYS_)))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def _agg_rows(df: DataFrame, kind: str, severity: Column, key: Column, size: Column,
              per_queue: bool = False) -> DataFrame:
    """Rows of a finding aggregated per (replica, kind, severity, key[, topic, queue])."""
    return df.select("replica", F.lit(kind).alias("kind"), severity.alias("sev"),
                     key.cast("bigint").alias("key"),
                     (c("topic") if per_queue else F.lit(None)).cast("string").alias("a_topic"),
                     (c("queue_id") if per_queue else F.lit(None)).cast("int").alias("a_qid"),
                     size.cast("bigint").alias("a_size"), "phys")


def _with_reference(spark: SparkSession, recs: DataFrame, others: dict[str, ReplicaFacts], ref: str,
                    plan: DetailPlan):
    """(rows of the other replicas in their compared buckets that differ from the reference's
    row at the same offset or have none there; the reference's valid rows below the consistent
    point that the replica lacks)."""
    dirty = _pairs(spark, plan.cmp_dirty)
    lo = _by_replica({n: f.lo for n, f in others.items()})
    cp = _by_replica({n: f.consistent_point for n, f in others.items()})
    ref_rows = (recs.filter(c("replica") == ref).drop("replica").join(dirty, "bucket")
                .select("replica", "phys", c("file_base").alias("g_base"), c("size").alias("g_size"),
                        c("rec_crc").alias("g_crc"), c("uniq_key").alias("g_uniq"), c("kind").alias("g_kind"))
                .filter(c("phys") >= lo))
    mine = recs.join(dirty, ["replica", "bucket"]).filter(c("phys") >= lo)
    j = mine.join(ref_rows, KEYS_, "full_outer")
    same = (c("g_kind").isNotNull() & (c("kind") == c("g_kind")) & c("size").eqNullSafe(c("g_size"))
            & c("rec_crc").eqNullSafe(c("g_crc")) & c("uniq_key").eqNullSafe(c("g_uniq")))
    cmp = j.filter(c("kind").isNotNull() & ~same)
    miss = j.filter(c("kind").isNull() & (c("g_kind") == OK) & (c("phys") < cp))
    return cmp, miss


def _record_differences(spark: SparkSession, diff: DataFrame, ref_f: ReplicaFacts,
                        bound: Column) -> DataFrame:
    fstops = spark.createDataFrame([(s.base, s.stop) for s in ref_f.files.values()] or [(-1, -1)],
                                   "file_base bigint, f_stop bigint")
    d = diff.join(F.broadcast(fstops), "file_base", "left")
    absent = c("g_kind").isNull()
    kind = (F.when(~absent, F.lit("record_mismatch"))
            .when(c("f_stop").isNull() | (c("phys") >= c("f_stop")), F.lit("gap"))
            .otherwise(F.lit("misaligned")))
    fields = F.concat_ws(",", *_differs(
        ("kind", c("kind"), c("g_kind")), ("size", c("size"), c("g_size")),
        ("record_crc", c("rec_crc"), c("g_crc")), ("uniq_key", c("uniq_key"), c("g_uniq"))))
    return _findings(d, kind, _severity(bound), c("phys"), c("topic"), c("queue_id"), c("queue_offset"),
                     size=c("size"), record_crc=c("rec_crc"), uniq_key=c("uniq_key"),
                     record_kind=c("kind"), reason=c("reason"), reference_size=c("g_size"),
                     reference_record_crc=c("g_crc"), reference_uniq_key=c("g_uniq"),
                     reference_kind=c("g_kind"), fields=F.when(~absent, fields),
                     reference_file_stop=F.when(absent, c("f_stop")))


def _consume_queues(recs: DataFrame, units: DataFrame, facts: dict[str, ReplicaFacts]) -> list[DataFrame]:
    """cq_bad_entry (live units outside holes) and cq_missing_entry, in the dirty buckets."""
    confirm = _by_replica({n: f.layout.confirm_offset for n, f in facts.items()})
    u = units.select("replica", "phys", c("topic").alias("u_topic"), c("queue_id").alias("u_qid"),
                     c("queue_offset").alias("u_qo"), c("size").alias("u_size"),
                     c("tag_hash").alias("u_tag"), F.lit(True).alias("u"))
    j = recs.join(u, KEYS_, "full_outer")
    diffs = F.concat_ws(",", *_differs(("topic", c("u_topic"), c("topic")),
                                       ("queue_id", c("u_qid"), c("queue_id")),
                                       ("queue_offset", c("u_qo"), c("queue_offset")),
                                       ("size", c("u_size"), c("size"))),
                        F.when((c("u_topic") != SCHEDULE_TOPIC) & ~c("u_tag").eqNullSafe(c("tag_hash")),
                               F.lit("tag_hash")))
    problem = (F.when(c("kind").isNull(), F.lit("no record at this offset"))
               .when(c("kind") == CORRUPT, F.lit("points at a corrupt record"))
               .when(diffs != "", F.concat(F.lit("mismatch: "), diffs)))
    bad = j.filter(c("u").isNotNull()).withColumn("problem", problem).filter(c("problem").isNotNull())
    dispatchable = ~c("sys_flag").bitwiseAND(0xC).isin(0x4, 0xC)
    missing = j.filter(c("u").isNull() & (c("kind") == OK) & dispatchable & (c("phys") < confirm))
    return [_findings(bad, "cq_bad_entry", ERROR, c("phys"), c("u_topic"), c("u_qid"), c("u_qo"),
                      problem=c("problem"), entry_size=c("u_size"), entry_tag_hash=c("u_tag"),
                      record_kind=c("kind"), record_topic=c("topic"), record_queue_id=c("queue_id"),
                      record_queue_offset=c("queue_offset"), record_size=c("size"),
                      record_tag_hash=c("tag_hash")),
            _findings(missing, "cq_missing_entry", ERROR, c("phys"), c("topic"), c("queue_id"),
                      c("queue_offset"), size=c("size"))]


def _queue_gaps(summary: DataFrame, facts: dict[str, ReplicaFacts]) -> list[DataFrame]:
    """Gaps inside a task (qgap rows) and between consecutive tasks that hold records of the
    queue (qedge rows: first/last queue offset), unless an unread hole lies between them."""
    inside = _findings(summary.filter(c("kind") == QGAP), "queue_offset_gap", ERROR, c("phys"),
                       c("topic"), c("queue_id"), c("queue_offset"), previous_queue_offset=c("a1"),
                       previous_offset=c("a2"))
    w = Window.partitionBy("replica", "topic", "queue_id").orderBy("phys")
    e = (summary.filter(c("kind") == QEDGE)
         .withColumn("p_qo", F.lag("a1").over(w)).withColumn("p_phys", F.lag("a2").over(w))
         .withColumn("seg", _segment(facts, "phys")).withColumn("p_seg", _segment(facts, "p_phys"))
         .filter(c("p_qo").isNotNull() & (c("seg") == c("p_seg")) & (c("queue_offset") != c("p_qo") + 1)))
    across = _findings(e, "queue_offset_gap", ERROR, c("phys"), c("topic"), c("queue_id"), c("queue_offset"),
                       previous_queue_offset=c("p_qo"), previous_offset=c("p_phys"))
    return [inside, across]


def _duplicates(recs: DataFrame) -> DataFrame:
    keys = ["replica", "topic", "queue_id", "uniq_key"]
    dispatchable = ~c("sys_flag").bitwiseAND(0xC).isin(0x4, 0xC)
    g = (recs.filter((c("kind") == OK) & c("uniq_key").isNotNull() & dispatchable).groupBy(*keys)
         .agg(F.count("*").alias("n"), F.array_sort(F.collect_list("phys")).alias("offs"),
              F.array_sort(F.collect_list("queue_offset")).alias("qos"))
         .filter(c("n") > 1))
    return _findings(g, "duplicate_key", INFO, c("offs")[0], c("topic"), c("queue_id"), c("qos")[0],
                     uniq_key=c("uniq_key"), count=c("n"), offsets=F.slice("offs", 1, 5),
                     queue_offsets=F.slice("qos", 1, 5))


def collect_findings(findings: DataFrame, max_examples: int) -> tuple[list[dict], dict]:
    """(examples, counts) as model.aggregate returns them, ranked in Spark."""
    key = ["replica", "kind", "severity"]
    w = Window.partitionBy(*key).orderBy(c("offset").asc_nulls_first(), F.coalesce(c("topic"), F.lit("")),
                                         F.coalesce(c("queue_id"), F.lit(-1)),
                                         F.coalesce(c("queue_offset"), F.lit(-1)))
    ranked = (findings.withColumn("rn", F.row_number().over(w))
              .withColumn("total", F.count("*").over(Window.partitionBy(*key)))
              .filter(c("rn") <= max(max_examples, 1)))
    examples, counts = [], {}
    for r in ranked.collect():
        counts[(r.replica, r.kind, r.severity)] = r.total
        if r.rn <= max_examples:
            examples.append({"replica": r.replica, "kind": r.kind, "severity": r.severity,
                             "offset": r.offset, "topic": r.topic, "queue_id": r.queue_id,
                             "queue_offset": r.queue_offset, "details": json.loads(r.details)})
    return examples, counts

"""The Spark job: start a session, scan every replica in parallel, run the checks.

Pass 1 reads every byte once: one task per commitlog file or file range (largest first) and one
per consume queue file, two concurrent jobs materialized with localCheckpoint. Tasks keep the
record data and emit summary rows (cluster.audit.scan / summarize / scan_cq). Ranges that do not
start on a record boundary are scanned again as whole files. The driver collects end rows and
the bucket digests (small), plans pass 2 (cluster.audit.plan), and pass 2 decodes only the dirty
buckets into record and unit rows for the record-level checks (cluster.audit.checks).
"""
from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from cluster.audit import checks, metadata, model, scan, scan_cq, summarize
from cluster.audit.replica_files import ReplicaLayout, split_points
from cluster.audit.plan import DetailPlan, plan_details

log = logging.getLogger(__name__)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUMMARY_SCHEMA = ", ".join(f"{n} {t}" for n, t in scan.SUMMARY_COLUMNS)
RECORD_SCHEMA = ", ".join(f"{n} {t}" for n, t in scan.RECORD_COLUMNS)
CQ_SCHEMA = ", ".join(f"{n} {t}" for n, t in scan_cq.CQ_COLUMNS)
DEFAULT_BUCKET = 16 << 20
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def make_spark(master: str | None = "local[*]", app_name: str = "replica-audit",
               conf: dict[str, str] | None = None, log_level: str = "WARN"):
    """A SparkSession with the UI off. In local mode the Python workers run this interpreter
    with this checkout on their path; on a cluster ship the code with --py-files (see
    cluster.audit.package). master=None leaves the master to spark-submit."""
    conf = dict(conf or {})
    if master is None or master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if REPO_ROOT not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([REPO_ROOT] + [p for p in paths if p])
    if master and master.startswith("local"):
        # The JVM only moves small summary rows here; the decoding runs in the Python workers.
        # C1-only JIT and the serial GC leave the cores to them (~10-20% faster end to end).
        conf.setdefault("spark.driver.extraJavaOptions", LOCAL_JVM_OPTIONS)
    from pyspark.sql import SparkSession
    builder = (SparkSession.builder.appName(app_name).config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    if master:
        builder = builder.master(master)
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = _get_or_create(builder)
    spark.sparkContext.setLogLevel(log_level)
    if master and not master.startswith("local"):
        ship_code(spark)
    return spark


def _get_or_create(builder):
    """builder.getOrCreate(), once more when the JVM gateway died before it started.
    pyspark starts the JVM with fork + exec (a Popen with preexec_fn); in a process whose gRPC
    threads are busy at that instant (the audit pulls its copies over gRPC; the test suite's
    workers call nodes) gRPC skips its fork handlers and the child can die before the exec:
    JAVA_GATEWAY_EXITED with nothing from Java (seen once in three suite runs). Nothing was
    started, so a second launch is a new attempt, not a repeat of a half-done one."""
    from pyspark.errors import PySparkRuntimeError
    try:
        return builder.getOrCreate()
    except PySparkRuntimeError as e:
        if e.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        log.warning("the Spark JVM exited before it started (%s); starting it once more", e)
        return builder.getOrCreate()


def ship_code(spark) -> str:
    """A driver started from a checkout against a cluster (`--master-url spark://...`): zip the
    code the executors need (cluster.audit.package) and add it to the job like spark-submit's
    --py-files. Returns the zip's path; the driver's file server hands it to the executors
    from there, so it is removed only when the driver's process exits."""
    from cluster.audit import package
    folder = tempfile.mkdtemp(prefix="audit-code-")
    atexit.register(shutil.rmtree, folder, True)
    out = os.path.join(folder, "audit.zip")
    package.build(out)
    spark.sparkContext.addPyFile(out)
    return out


def _concurrently(*calls):
    """Run independent Spark actions from driver threads: small jobs overlap instead of
    queueing one after the other (most of their time is latency, not work)."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        return [f.result() for f in futures]


def _cores(spark) -> int:
    return max(1, spark.sparkContext.defaultParallelism)


def _rows_df(spark, task_bins: list[list], fn, schema: str):
    if not task_bins:
        return spark.createDataFrame([], schema)
    rdd = spark.sparkContext.parallelize(task_bins, len(task_bins)).mapPartitions(fn)
    return spark.createDataFrame(rdd, schema, verifySchema=False).localCheckpoint(eager=True)


def _cl_bins(tasks: list, split_bytes: int, cores: int) -> list[list]:
    """About max(2 * cores, total bytes / split) partitions: one per range of a big file,
    small files packed together."""
    total = sum(t.end - t.start for t in tasks)
    return scan.bins(tasks, lambda t: t.end - t.start, max(2 * cores, -(-total // max(1, split_bytes))))


def _cq_bins(tasks: list, cores: int) -> list[list]:
    return scan.bins(tasks, lambda t: os.path.getsize(t.path), 2 * cores)


def pass1(spark, layouts: list[ReplicaLayout], split_bytes: int, bucket_bytes: int):
    """(summary rows, consume-queue summary rows, end rows, files scanned again whole)."""
    from pyspark.sql import functions as F
    cl_tasks = [t for lay in layouts
                for t in scan.plan_commitlog_tasks(lay.name, lay.commitlog, split_points(lay, split_bytes))]
    cq_tasks = [t for lay in layouts for t in scan_cq.plan_cq_tasks(lay.name, lay.cq_files, lay.min_offset)]
    cores = _cores(spark)
    summ_fn = partial(summarize.summarize_bins, bucket_bytes=bucket_bytes)
    summ, cqs = _concurrently(  # the two scans share the executors' cores
        lambda: _rows_df(spark, _cl_bins(cl_tasks, split_bytes, cores), summ_fn, SUMMARY_SCHEMA),
        lambda: _rows_df(spark, _cq_bins(cq_tasks, cores),
                         partial(scan_cq.summarize_cq_bins, bucket_bytes=bucket_bytes), CQ_SCHEMA))
    ends = summ.filter(F.col("kind").isin(scan.END, scan.RESPLIT)).collect()
    bad = {(r.replica, r.file_base) for r in ends if r.kind == scan.RESPLIT}
    if bad:
        again = [t for lay in layouts for t in scan.plan_commitlog_tasks(
            lay.name, [f for f in lay.commitlog if (lay.name, f.base) in bad], {})]
        redo = _rows_df(spark, _cl_bins(again, split_bytes, cores), summ_fn, SUMMARY_SCHEMA)
        drop = F.lit(False)
        for rep, base in bad:
            drop = drop | ((F.col("replica") == rep) & (F.col("file_base") == base))
        summ = summ.filter(~drop).unionByName(redo)
        ends = [r for r in ends if (r.replica, r.file_base) not in bad] + \
            redo.filter(F.col("kind") == scan.END).collect()
    return summ, cqs, [r for r in ends if r.kind == scan.END], len(bad)


def pass2(spark, layouts: list[ReplicaLayout], plan: DetailPlan):
    """(record rows, unit rows) of the dirty buckets."""
    from pyspark.sql import functions as F
    cores = _cores(spark)
    dirty = {name: frozenset(b) for name, b in plan.cq_dirty.items()}
    cq_tasks = [t for lay in layouts if lay.name in dirty
                for t in scan_cq.plan_cq_tasks(lay.name, lay.cq_files, lay.min_offset)]
    recs, units = _concurrently(
        lambda: _rows_df(spark, _cl_bins(plan.record_tasks, plan.bucket_bytes, cores), scan.record_rows_bins,
                         RECORD_SCHEMA),
        lambda: _rows_df(spark, _cq_bins(cq_tasks, cores), partial(
            scan_cq.unit_rows_bins, bucket_bytes=plan.bucket_bytes, dirty=dirty), CQ_SCHEMA))
    return recs.filter(F.col("kind").isin(scan.OK, scan.CORRUPT)), units


def run(spark, layouts: list[ReplicaLayout], *, split_bytes: int = 256 << 20,
        bucket_bytes: int = DEFAULT_BUCKET, reference: str | None = None,
        max_examples: int = 20) -> model.AuditResult:
    """The audit of one broker group's replicas."""
    t0 = time.perf_counter()
    scanned = pass1(spark, layouts, split_bytes, bucket_bytes)
    return _judge(spark, layouts, scanned, t0, time.perf_counter() - t0, bucket_bytes=bucket_bytes,
                  reference=reference, max_examples=max_examples)


def run_groups(spark, groups: dict[str, list[ReplicaLayout]], *, split_bytes: int = 256 << 20,
               bucket_bytes: int = DEFAULT_BUCKET, reference: str | None = None,
               max_examples: int = 20) -> dict[str, model.AuditResult]:
    """The audit of several broker groups in one application: ONE pass-1 scan over every
    replica of every group (its tasks share the executors, the biggest files first whichever
    group they belong to), then per group, concurrently from driver threads, what `run` does
    after its scan (reference, digests compared, pass 2 of the group's dirty buckets, checks,
    metadata) on that group's rows only. Replica names must be unique across the groups.
    `reference` applies to the group that has a replica of that name. The scan's timing and
    rate are the shared scan's."""
    everything = [lay for lays in groups.values() for lay in lays]
    t0 = time.perf_counter()
    summ, cqs, ends, resplit = pass1(spark, everything, split_bytes, bucket_bytes)
    t_scan = time.perf_counter() - t0
    from pyspark.sql import functions as F

    def one(lays: list[ReplicaLayout]) -> model.AuditResult:
        names = [lay.name for lay in lays]
        mine = (summ.filter(F.col("replica").isin(names)), cqs.filter(F.col("replica").isin(names)),
                [e for e in ends if e.replica in names], resplit)
        ref = reference if reference in names else None
        return _judge(spark, lays, mine, t0, t_scan, bucket_bytes=bucket_bytes, reference=ref,
                      max_examples=max_examples)

    done = _concurrently(*[partial(one, lays) for lays in groups.values()])
    return dict(zip(groups, done))


def _judge(spark, layouts: list[ReplicaLayout], scanned: tuple, t0: float, t_scan: float, *,
           bucket_bytes: int, reference: str | None, max_examples: int) -> model.AuditResult:
    """Everything after pass 1 for one group: `scanned` is pass1's answer for its replicas."""
    from pyspark.sql import functions as F
    c = F.col
    summ_all, cqs, ends, resplit = scanned
    facts = {lay.name: model.base_facts(lay, [
        (e.file_base, e.a1 - e.file_base, e.phys, e.topic, e.reason, e.a2)
        for e in ends if e.replica == lay.name]) for lay in layouts}
    ref_name = model.finish(facts, reference)
    keep = ~c("kind").isin(scan.END, scan.RESPLIT)
    for name, f in facts.items():  # rows of tasks after the stop of their file
        for a, b in f.cuts:
            keep = keep & ~((c("replica") == name) & (c("phys") > a) & (c("phys") < b))
    summ = summ_all.filter(keep)
    (rec_digests, unit_digests), dups, stats, (table_counts, table_events), holding = _concurrently(
        lambda: checks.digests(summ, cqs), lambda: checks.dup_candidates(summ),
        lambda: cqs.filter(c("kind") == scan_cq.STATS).collect(),
        lambda: checks.table_events(summ, metadata.group_bound(facts)),
        lambda: checks.queue_records(summ))
    plan = plan_details(layouts, facts, ref_name, bucket_bytes, rec_digests, unit_digests, dups)
    t1 = time.perf_counter()
    recs, units = pass2(spark, layouts, plan)
    t_pass2 = time.perf_counter() - t1
    examples, counts = checks.collect_findings(
        checks.all_findings(spark, recs, units, summ, facts, ref_name, plan), max_examples)
    queues = model.queue_table([(r.replica, r.topic, r.queue_id, r.queue_offset, r.a1, r.a2, r.a3, r.a4)
                                for r in stats])
    meta_findings, consumers, meta = metadata.audit(facts, ref_name, table_events, table_counts, holding,
                                                    queues, from_snapshot=True)
    driver = model.epoch_findings(facts, ref_name) + meta_findings
    records = sum(f.records + f.corrupt for f in facts.values())
    cores = _cores(spark)
    result = model.AuditResult(
        ref_name, facts, examples, counts, queues,
        scan={"records": records, "bytes": sum(f.bytes for f in facts.values()),
              "commitlog_tasks": len(ends), "cq_files": sum(len(lay.cq_files) for lay in layouts),
              "resplit_files": resplit, "cores": cores,
              "records_per_s": round(records / t_scan) if t_scan else None,
              "records_per_s_per_core": round(records / t_scan / cores) if t_scan else None,
              **plan.summary()},
        timings={"scan_s": round(t_scan, 3), "pass2_s": round(t_pass2, 3),
                 "checks_s": round(time.perf_counter() - t0 - t_scan, 3)},
        consumers=consumers, metadata=meta)
    return model.finish_result(result, driver, max_examples)

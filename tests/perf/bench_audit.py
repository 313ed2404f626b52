"""Benchmark of the Spark consistency audit (cluster.audit) on three ~1 GiB replica stores.

    .venv/bin/python -m tests.perf.bench_audit                 # 1 GiB stores, local[2]
    .venv/bin/python -m tests.perf.bench_audit --quick         # 128 MiB stores
    .venv/bin/python -m tests.perf.bench_audit --reuse DIR     # build into DIR once, reuse after

One store is filled with MessageStore puts of 1 KiB messages (TAGS, KEYS, a 32-hex UNIQ_KEY,
8 queues, default 1 GiB commitlog files), after the topic table's record of the topic (the audit
checks that every queue holding messages is routed); its checkpoint gets confirm offset = end and its epoch
file one epoch, then it is copied twice (the audit does the same work on identical replicas).
The audit runs on local[2]; the figures are printed (total target < 90 s), nothing is asserted.
Stores live in a temporary directory (--tmpdir) removed at the end unless --reuse is given.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

from cluster.audit import job, replica_files, report
from cluster.metadata.topic_state import TOPIC_RECORDS, upsert_event
from ha.epoch import EpochCache, EpochEntry
from store.checkpoint import StoreCheckpoint
from store.codec import Message
from store.config import StoreConfig
from store.epoch_file import EpochFile
from store.json_config import TopicConfig
from store.layout import CHECKPOINT_FILE, COMMITLOG_DIR, EPOCH_FILE
from store.message_store import MessageStore
from store.put_result import PutStatus

MiB = 1 << 20
TOPIC, QUEUES, BODY = "BenchTopic", 8, os.urandom(1024)
NAMES = ("master", "slave1", "slave2")
TARGET_TOTAL_S = 90.0


def fill(store_dir: str, size: int) -> tuple[int, int, float]:
    """(messages, end offset, seconds) of a store filled up to `size` bytes."""
    t0 = time.perf_counter()
    store = MessageStore(StoreConfig(store_path_root_dir=store_dir))
    store.start()
    n = 0
    try:
        born = int(time.time() * 1000)
        topic = upsert_event(TopicConfig(topic_name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES),
                             born, "admin")
        if store.put_messages([TOPIC_RECORDS.to_message(topic)], allow_system_topic=True).status \
                is not PutStatus.PUT_OK:
            raise RuntimeError("fill failed: the topic table's record")
        while store.max_phy_offset() < size:
            batch = [Message(TOPIC, BODY, (n + i) % QUEUES,
                             {"TAGS": f"Tag{(n + i) % 3}", "KEYS": f"order-{n + i:012d}",
                              "UNIQ_KEY": uuid.uuid4().hex.upper()}, born_timestamp=born)
                     for i in range(64)]
            r = store.put_messages(batch)
            if r.status is not PutStatus.PUT_OK:
                raise RuntimeError(f"fill failed: {r.status} {r.reason}")
            n += len(batch)
        deadline = time.monotonic() + 300
        while store.reput.behind() > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        end = store.max_phy_offset()
    finally:
        store.shutdown()
    cp = StoreCheckpoint.load(os.path.join(store_dir, CHECKPOINT_FILE))
    cp.confirm_phy_offset = end  # as a replicated store whose slaves acknowledged everything
    cp.flush()
    EpochFile(os.path.join(store_dir, EPOCH_FILE)).save(EpochCache([EpochEntry(1, 0)]))
    return n, end, time.perf_counter() - t0


def build(root: str, size: int) -> None:
    first = os.path.join(root, NAMES[0])
    if all(os.path.isdir(os.path.join(root, n, COMMITLOG_DIR)) for n in NAMES):
        print(f"reusing the stores in {root}", flush=True)
        return
    for n in NAMES:
        shutil.rmtree(os.path.join(root, n), ignore_errors=True)
    n, end, dt = fill(first, size)
    print(f"filled {first}: {n:,} messages, {end / MiB:,.0f} MiB in {dt:.1f} s", flush=True)
    t0 = time.perf_counter()
    for name in NAMES[1:]:  # cp keeps the sparse files (index, preallocated tails) sparse
        subprocess.run(["cp", "-a", "--sparse=always", first, os.path.join(root, name)], check=True)
    print(f"copied twice in {time.perf_counter() - t0:.1f} s", flush=True)


def run(root: str, master: str, split_mib: float) -> dict:
    t0 = time.perf_counter()
    spark = job.make_spark(master, app_name="bench-audit", conf={"spark.sql.shuffle.partitions": "4"})
    t_spark = time.perf_counter() - t0
    layouts = [replica_files.discover(os.path.join(root, n), n) for n in NAMES]
    result = job.run(spark, layouts, split_bytes=int(split_mib * MiB))
    t1 = time.perf_counter()
    rep = report.build(result, layouts, {"spark_start_s": round(t_spark, 3), **result.timings})
    report.write_json(rep, os.path.join(root, "report.json"))
    report.chart(rep, os.path.join(root, "lag.png"))
    rep["timings"]["report_s"] = round(time.perf_counter() - t1, 3)
    rep["timings"]["total_s"] = round(time.perf_counter() - t0, 3)
    spark.stop()
    return rep


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="128 MiB stores instead of 1 GiB")
    p.add_argument("--size-mib", type=int, help="store size (default 1024, 128 with --quick)")
    p.add_argument("--reuse", metavar="DIR", help="build the stores into DIR once and reuse them")
    p.add_argument("--tmpdir", help="parent of the temporary stores (default: the system's)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--split-mib", type=float, default=256.0)
    args = p.parse_args(argv)
    size = (args.size_mib or (128 if args.quick else 1024)) * MiB
    root = args.reuse or tempfile.mkdtemp(prefix="bench-audit-", dir=args.tmpdir)
    os.makedirs(root, exist_ok=True)
    try:
        build(root, size)
        rep = run(root, args.master, args.split_mib)
    finally:
        if not args.reuse:
            shutil.rmtree(root, ignore_errors=True)
    t, sc = rep["timings"], rep["scan"]
    print(report.summary_text(rep))
    print()
    print(f"audit of 3 x {size / MiB:,.0f} MiB on {args.master} ({sc['cores']} cores, split "
          f"{args.split_mib:g} MiB, {sc['commitlog_tasks']} commitlog tasks, {sc['cq_files']} cq files)")
    status = "PASS" if t["total_s"] < TARGET_TOTAL_S else "MISS"
    print(f"  total          {t['total_s']:8.1f} s   (target < {TARGET_TOTAL_S:.0f} s: {status})")
    for key, label in (("spark_start_s", "spark start"), ("scan_s", "scan"), ("checks_s", "checks"),
                       ("report_s", "report")):
        print(f"  {label:<14} {t[key]:8.1f} s")
    print(f"  records        {sc['records']:>10,}  ({sc['bytes'] / MiB:,.0f} MiB)")
    print(f"  records/s      {sc['records_per_s']:>10,}  (scan phase)")
    print(f"  per core       {sc['records_per_s_per_core']:>10,}")
    print(f"  findings       {rep['counts']['error']} error, {rep['counts']['warning']} warning, "
          f"{rep['counts']['info']} info; exit status would be {rep['exit_status']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

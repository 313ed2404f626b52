"""Session fixtures of the audit tests: ONE local[2] SparkSession, the replica stores of ONE
real replicated run, and the audits of a clean copy, a damaged copy and a copy with damaged
metadata (each computed once)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cluster.audit import job, replica_files
from cluster.consume.records import CONSUMER_STATE_RECORDS
from cluster.metadata.topic_state import TOPIC_RECORDS
from store.codec import Message

from tests.support import audit_stores as stores
from tests.support.audit_stores import BUCKET, REPO_ROOT, SPLIT, layouts_of



@pytest.fixture(scope="session")
def spark():
    session = job.make_spark("local[2]", app_name="audit-tests",
                             conf={"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def replica_stores(tmp_path_factory):
    return stores.produce(str(tmp_path_factory.mktemp("replicated-run")))


@pytest.fixture(scope="session")
def clean(replica_stores, tmp_path_factory):
    return stores.copy_stores(replica_stores, str(tmp_path_factory.mktemp("clean")))


@pytest.fixture(scope="session")
def cli_runs(clean, damaged, tmp_path_factory):
    """`python -m cluster.audit` on the clean and on the damaged copies, each starting its own
    Spark. Started before the in-process audits (see clean_result) so that they overlap;
    test_cli_exit_codes waits for them. Yields {name: (process, output dir)}."""
    procs = {}
    for name, dirs, extra in (("good", clean, ()),
                              ("bad", damaged[0], ("--split-mib", "0.25", "--bucket-mib", "0.0625"))):
        out = tmp_path_factory.mktemp(f"cli-{name}")
        cmd = [sys.executable, "-m", "cluster.audit", *[dirs[n] for n in stores.NAMES],
               "--names", ",".join(stores.NAMES), "--master-url", "local[2]",
               "--json", str(out / "report.json"), "--chart", str(out / "lag.png"), *extra]
        procs[name] = (subprocess.Popen(cmd, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": REPO_ROOT},
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out)
    yield procs
    for proc, _ in procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.fixture(scope="session")
def clean_result(cli_runs, spark, clean):
    return job.run(spark, layouts_of(clean))


@pytest.fixture(scope="session")
def damaged(replica_stores, tmp_path_factory):
    """A copy with one of each damage; returns the copies and where the damage lies:
    slave1: a flipped body byte below the confirm offset, and a consume queue unit that baits
            the split planner (it points inside a record);
    slave2: a tail written after a failover in epoch 2 (it was briefly master);
    master: epoch 3 with a few records of its own (the new master), one consume queue unit
            zeroed, and a consumer offset past the end of a queue."""
    dirs = stores.copy_stores(replica_stores, str(tmp_path_factory.mktemp("damaged")))
    info = {"end": replica_files.discover(dirs["master"], "m").confirm_offset}
    info["flipped"] = stores.flip_body_byte(dirs["slave1"], "AuditOrders", 0, 50)
    info["slave2_tail"] = stores.write_after_failover(dirs["slave2"], 2, 30)
    info["master_tail"] = stores.write_after_failover(dirs["master"], 3, 10, topic="AuditLogs")
    info["zeroed"] = stores.read_cq_unit(dirs["master"], "AuditPayments", 0, 299)
    stores.write_cq_unit(dirs["master"], "AuditPayments", 0, 299, (0, 0, 0))
    qmax = 500  # AuditOrders has 4 queues of 1500 / 4 = 375 messages
    stores.write_consumer_offsets(dirs["master"], {"AuditOrders@audit-group": {0: qmax, 1: 10}})
    info["bait"] = stores.bait_split_boundary(dirs["slave1"], "AuditLogs", 0, 1024 * 1024 + SPLIT)
    return dirs, info


@pytest.fixture(scope="session")
def damaged_result(spark, damaged):
    dirs, _ = damaged
    return job.run(spark, layouts_of(dirs), split_bytes=SPLIT, bucket_bytes=BUCKET)


@pytest.fixture(scope="session")
def meta_damaged(replica_stores, tmp_path_factory):
    """A copy whose metadata is damaged; returns the copies and where the damage lies:
    all:    a consumer state `offset` record (group audit-ahead, AuditOrders queue 2 -> 9999)
            past the queue's end (375), the same on every replica;
    slave1: lost a topic table update (AuditLogs from 2 to 4 queues) that master and slave2
            hold (the same bytes at the same offset);
    master: a consumer state `offset` record (group audit-lost, AuditOrders queue 1 -> 7) that
            neither slave holds; the confirm offsets of all three are then set past it, so both
            records lie below the group's lowest confirm offset (`bound`);
    master: above that, records the store alone wrote: 3 in AuditPayments queue 3 (the topic
            has 3 queues) and 2 in AuditGhost (not in the topic table)."""
    dirs = stores.copy_stores(replica_stores, str(tmp_path_factory.mktemp("meta-damaged")))
    info = {"end": replica_files.discover(dirs["master"], "m").confirm_offset}
    info["ahead"] = stores.append_table_event([dirs[n] for n in stores.NAMES], CONSUMER_STATE_RECORDS,
                                              stores.offset_event("audit-ahead", "AuditOrders", 2, 9999))
    info["update"] = stores.append_table_event([dirs["master"], dirs["slave2"]], TOPIC_RECORDS,
                                               stores.topic_upsert("AuditLogs", 4))
    info["offset"] = stores.append_table_event([dirs["master"]], CONSUMER_STATE_RECORDS,
                                               stores.offset_event("audit-lost", "AuditOrders", 1, 7))
    info["bound"] = info["offset"][1]
    info["unroutable"] = stores.put_raw(dirs["master"], [
        *[Message("AuditPayments", f"beyond the table, #{i}".encode(), 3, {"TAGS": "TagA"}) for i in range(3)],
        *[Message("AuditGhost", f"no topic, #{i}".encode(), 0, {"TAGS": "TagA"}) for i in range(2)]])
    for d in dirs.values():
        stores.set_confirm_offset(d, info["bound"])
    return dirs, info


@pytest.fixture(scope="session")
def meta_result(spark, meta_damaged):
    dirs, _ = meta_damaged
    return job.run(spark, layouts_of(dirs), split_bytes=SPLIT, bucket_bytes=BUCKET)

"""Spark consistency audit of the replicas of every broker group, one job for all.

Several groups in one job: `--groups G,G,... --route route.json` (findings per group plus the
cluster-wide ones of `groups`).

    python -m cluster.audit MASTER_DIR SLAVE1_DIR SLAVE2_DIR [--names m,s1,s2]
        [--master-url local[*]] [--json report.json] [--chart lag.png] [--reference NAME]
        [--split-mib 256] [--bucket-mib 16] [--max-examples 20] [--conf key=value ...]

On a cluster (the store directories readable at the same paths on the driver and executors):

    python -m cluster.audit.package audit.zip
    spark-submit --master spark://host:7077 --py-files audit.zip cluster/audit/spark_main.py DIR...

Exit status 0: no error finding; 1: at least one error; 2: bad input.

How it reads: pass 1 decodes every commitlog file (or range of about --split-mib, cut at record
boundaries taken from the consume queues) and every consume queue file in parallel tasks that
keep record data local and emit small rows: per bucket of --bucket-mib of offsets, digests of the
records and of their consume-queue units; queue-offset gaps and first/last per queue; unique-key
hashes; corrupt records and where each scan stopped. The driver compares the digests; pass 2
decodes only the buckets whose digests differ (and duplicate-key candidates) into one row per
record or unit, and the record-level checks run as DataFrame joins on those rows. The records of
the replicated tables (topic table, consumer state) travel to the driver as they are, which
replays them with the node's own state machines (metadata).

Modules, one job each:
    replica_files  driver: discover files, checkpoint, epochs, consume-queue files, index
               headers, consumer offsets; record boundaries to split big commitlog files
    scan       executors: commitlog tasks, record rows (pass 2, reference), shared helpers
    summarize  executors: pass-1 summary rows of a commitlog range (and the table records)
    scan_cq    executors: consume-queue stats, unit digests (pass 1) and unit rows (pass 2)
    digest     the hashes behind the digests
    model      driver: per-replica facts (valid end, holes, reference, consistent point,
               confirm bound), severity rules, finding aggregation, consumer-offset checks
    plan       driver: the dirty buckets and the pass-2 ranges
    metadata   driver: topic tables and consumer state replayed per replica; routes, tables
               and committed offsets compared; consumer lag per group
    checks     the checks as Spark DataFrame logic
    reference  the same checks in plain Python over every record (the oracle of the tests)
    job        Spark session and the run: pass 1, planning, pass 2, checks; run_groups: one
               pass 1 over every group's replicas, then each group judged on its own rows
    groups     driver, plain objects: the cluster-wide checks (the controller's route registry
               against each group's topic table, queue numbers that differ between groups)
    report     JSON report, terminal summary, PNG chart
    audit_main arguments and exit status; __main__ and spark_main (spark-submit) call it
    package    zip of the code for spark-submit --py-files
"""

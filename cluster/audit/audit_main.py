"""Command line of the audit (`python -m cluster.audit`, `spark-submit .../spark_main.py`).

    python -m cluster.audit REPLICA_DIR [REPLICA_DIR ...] [--names a,b,c] [--master-url local[*]]
        [--json report.json] [--chart lag.png] [--reference NAME] [--split-mib 256]
        [--bucket-mib 16] [--max-examples 20] [--conf spark.key=value ...] [--quiet]

Exit status: 0 replicas agree (warnings and info allowed), 1 at least one error finding,
2 bad input (missing directory, not a store, bad option) -- reported before Spark starts.
With --groups (a group per directory) the replicas of every group are audited in one Spark
application (cluster.audit.job.run_groups) and the report adds the cluster-wide findings
(cluster.audit.groups: the route registry of --route against each group's topic table, topics
whose queue numbers differ between groups).
In local mode the shuffle partitions default to 2 x cores and the driver JVM runs with
job.LOCAL_JVM_OPTIONS; --conf overrides either.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from cluster.audit import report
from cluster.audit.replica_files import BadInput, discover

EXIT_OK, EXIT_ERRORS, EXIT_BAD_INPUT = 0, 1, 2


def build_parser(default_master: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cluster.audit",
                                description="Spark consistency audit of the replicas of one broker group (or of several: --groups).")
    p.add_argument("dirs", nargs="+", metavar="REPLICA_DIR", help="store directory of a replica")
    p.add_argument("--names", help="comma-separated replica names (default: directory names)")
    p.add_argument("--master-url", default=default_master,
                   help="Spark master (default: %(default)s; under spark-submit: its --master)")
    p.add_argument("--json", metavar="FILE", help="write the JSON report here")
    p.add_argument("--chart", metavar="PNG", help="write the lag chart here")
    p.add_argument("--reference", metavar="NAME",
                   help="reference replica (default: highest last epoch, then largest valid end)")
    p.add_argument("--split-mib", type=float, default=256.0,
                   help="decode commitlog files in ranges of about this size (default 256)")
    p.add_argument("--bucket-mib", type=float, default=16.0,
                   help="digest bucket: replicas are compared record by record only in buckets "
                        "whose digests differ (default 16)")
    p.add_argument("--max-examples", type=int, default=20,
                   help="findings kept per replica, kind and severity (default 20)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no terminal summary")
    p.add_argument("--groups", metavar="G,G,...",
                   help="the broker group of each directory, in order: audit every group in one "
                        "job (findings per group, plus the cluster-wide ones of cluster.audit.groups)")
    p.add_argument("--route", metavar="ROUTE_JSON",
                   help="with --groups: the controller's route registry saved with the copies "
                        "(route.json of `cluster audit`)")
    p.add_argument("--no-route-reason", default="",
                   help="with --groups and no --route: why there is none (the finding says it)")
    p.add_argument("--no-route-info", action="store_true",
                   help="with --groups and no --route: report it as info, not a warning "
                        "(an --offline audit of a stopped cluster has no registry to fetch)")
    return p


def _names(args) -> list[str]:
    if args.names:
        names = [n.strip() for n in args.names.split(",")]
        if len(names) != len(args.dirs) or not all(names):
            raise BadInput(f"--names lists {len(names)} name(s) for {len(args.dirs)} director(y/ies)")
    else:
        names = [os.path.basename(os.path.normpath(d)) or d for d in args.dirs]
        if len(set(names)) != len(names):
            names = [f"{n}#{i}" for i, n in enumerate(names)]
    if len(set(names)) != len(names):
        raise BadInput(f"replica names are not unique: {names}")
    if args.reference is not None and args.reference not in names:
        raise BadInput(f"--reference {args.reference!r} is not one of {names}")
    return names


def _groups(args, names: list[str]) -> dict[str, list[int]] | None:
    """--groups: group -> indexes of its directories, in the order the groups first appear."""
    if args.groups is None:
        if args.route:
            raise BadInput("--route needs --groups")
        return None
    groups = [g.strip() for g in args.groups.split(",")]
    if len(groups) != len(names) or not all(groups):
        raise BadInput(f"--groups lists {len(groups)} group(s) for {len(names)} director(y/ies)")
    out: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        out.setdefault(g, []).append(i)
    return out


def _spark_conf(args) -> dict[str, str]:
    conf = {}
    master = args.master_url or ""
    if master.startswith("local"):
        inner = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
        cores = (os.cpu_count() or 2) if inner in ("*", "") else int(inner.split(",")[0])
        conf["spark.sql.shuffle.partitions"] = str(max(4, 2 * cores))
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise BadInput(f"--conf {item!r} is not KEY=VALUE")
        conf[key] = value
    return conf


def main(argv: list[str] | None = None, default_master: str | None = "local[*]") -> int:
    args = build_parser(default_master).parse_args(argv)
    t_start = time.perf_counter()
    try:
        if args.split_mib <= 0 or args.bucket_mib <= 0 or args.max_examples < 0:
            raise BadInput("--split-mib and --bucket-mib must be positive, --max-examples not negative")
        names = _names(args)
        layouts = [discover(d, n) for d, n in zip(args.dirs, names)]
        conf = _spark_conf(args)
        groups = _groups(args, names)
        saved = _read_route(args.route) if args.route else None
    except BadInput as e:
        print(f"audit: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if groups is not None:
        return _main_groups(args, {g: [layouts[i] for i in idx] for g, idx in groups.items()},
                            saved, conf, t_start)
    spark, result, t_spark = _spark_run(args, conf, lambda job, spark, sizes: job.run(spark, layouts, **sizes))
    t_report = time.perf_counter()
    rep = report.build(result, layouts, {"spark_start_s": round(t_spark, 3), **result.timings})
    _charts(args, [(rep, args.chart)] if args.chart else [])
    return _finish(args, spark, rep, report.summary_text, t_report, t_start)


def _spark_run(args, conf: dict[str, str], run):
    """(the session, run(job, session, sizes and options), seconds the session took to start);
    the session is stopped when run raises."""
    from cluster.audit import job
    t0 = time.perf_counter()
    spark = job.make_spark(args.master_url, conf=conf)
    t_spark = time.perf_counter() - t0
    sizes = {"split_bytes": max(1, int(args.split_mib * (1 << 20))),
             "bucket_bytes": max(1, int(args.bucket_mib * (1 << 20))),
             "reference": args.reference, "max_examples": args.max_examples}
    try:
        return spark, run(job, spark, sizes), t_spark
    except BaseException:
        spark.stop()
        raise


def _charts(args, charts: list[tuple[dict, str]]) -> None:
    try:
        for rep, path in charts:
            report.chart(rep, path)
    except ImportError as e:  # matplotlib is only needed for --chart
        print(f"audit: no chart ({e})", file=sys.stderr)


def _finish(args, spark, rep: dict, text, t_report: float, t_start: float) -> int:
    """Timings, --json, the summary (`text(rep)`), the session stopped; the exit status."""
    rep["timings"]["report_s"] = round(time.perf_counter() - t_report, 3)
    rep["timings"]["total_s"] = round(time.perf_counter() - t_start, 3)
    if args.json:
        report.write_json(rep, args.json)
    if not args.quiet:
        print(text(rep))
    spark.stop()
    return rep["exit_status"]


def _read_route(path: str):
    from cluster.audit.groups import route_from_json
    try:
        with open(path, encoding="utf-8") as f:
            return route_from_json(json.load(f))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BadInput(f"--route {path}: {e}") from None


def _main_groups(args, groups: dict, saved, conf: dict[str, str], t_start: float) -> int:
    """One Spark application over every group (job.run_groups), the cluster-wide checks
    (cluster.audit.groups), one report: per group as `python -m cluster.audit` writes for one
    group, plus the cluster's findings. --chart PATH writes one chart per group
    (PATH's name with -<group> before its extension)."""
    from cluster.audit import groups as cluster_checks
    spark, results, t_spark = _spark_run(args, conf, lambda job, spark, sizes: job.run_groups(spark, groups, **sizes))
    t_report = time.perf_counter()
    per_group = {g: report.build(r, groups[g], dict(r.timings)) for g, r in results.items()}
    tables = {g: cluster_checks.GroupTable.from_metadata(g, rep["metadata"]) for g, rep in per_group.items()}
    found = cluster_checks.cluster_findings(
        saved, tables, cluster_checks.INFO if args.no_route_info else cluster_checks.WARNING,
        args.no_route_reason)
    scan_s = max((r.timings.get("scan_s", 0) for r in results.values()), default=0)
    rep = report.build_groups(per_group, found, cluster_checks.route_to_json(saved) if saved else None,
                              {"spark_start_s": round(t_spark, 3), "scan_s": scan_s})
    base, ext = os.path.splitext(args.chart or "")
    _charts(args, [(r, f"{base}-{g}{ext or '.png'}") for g, r in per_group.items()] if args.chart else [])
    return _finish(args, spark, rep, report.summary_text_groups, t_report, t_start)

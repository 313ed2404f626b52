"""`python -m cluster history search`: scan every archived commitlog file with Spark (or, with
--local, in this process) for a key, tag, property, time range or body substring; a table,
--json FILE|- or --parquet DIR. Reads the archive's directory (on the archive's machine, or a
shared file system for a Spark cluster)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from cluster.archive.search_filter import SearchFilter
from cluster.archive.spark_search import search_local, search_spark
from cluster.cli.output import fmt_ms, table
from cluster.cli.timeparse import parse_time_ms


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("search", help="search every archived commitlog file with Spark: key, "
                                      "tag, property, time range, body substring")
    p.add_argument("--archive-dir", required=True, help="the archive's archiveStorePath")
    p.add_argument("--group", default="", help="one broker group (default: all)")
    p.add_argument("--topic", default="")
    p.add_argument("--key", default="", help="UNIQ_KEY or one of the KEYS")
    p.add_argument("--tag", default="")
    p.add_argument("--property", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--begin", type=parse_time_ms, default=0, metavar="TIME")
    p.add_argument("--end", type=parse_time_ms, default=0, metavar="TIME")
    p.add_argument("--body-contains", default="", metavar="TEXT")
    p.add_argument("--limit", type=int, default=0, help="print at most this many (0: all)")
    p.add_argument("--local", action="store_true", help="scan in this process, without Spark")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--json", default="", metavar="FILE|-", help="write the matches as JSON")
    p.add_argument("--parquet", default="", metavar="DIR", help="write them as Parquet (Spark)")
    p.set_defaults(parser=p)
    return p


def run(args) -> int:
    try:
        flt = SearchFilter(topic=args.topic, key=args.key, tag=args.tag,
                           properties=tuple(SearchFilter.property_pair(p) for p in args.property),
                           begin_ms=args.begin, end_ms=args.end,
                           body_contains=args.body_contains.encode())
    except ValueError as e:
        print(f"history search: {e}", file=sys.stderr)
        return 2
    if not os.path.isdir(args.archive_dir):
        print(f"history search: {args.archive_dir} is not a directory", file=sys.stderr)
        return 2
    if args.local and args.parquet:
        print("history search: --parquet needs Spark (leave out --local)", file=sys.stderr)
        return 2
    if args.local:
        rows = search_local(args.archive_dir, flt, args.group)
    else:
        from cluster.audit.job import make_spark
        spark = make_spark(args.master, app_name="archive-search")
        try:
            df = search_spark(spark, args.archive_dir, flt, args.group)
            if args.parquet:
                df.write.mode("overwrite").parquet(args.parquet)
            rows = [r.asDict() for r in df.collect()]
        finally:
            spark.stop()
    shown = rows[:args.limit] if args.limit else rows
    if args.json:
        text = json.dumps(shown, indent=1)
        if args.json == "-":
            print(text)
            return 0
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text)
    table(("group", "topic", "queue", "offset", "stored", "msg id", "unique key", "tags", "keys",
           "size"),
          [(r["group"], r["topic"], r["queue_id"], r["queue_offset"], fmt_ms(r["store_timestamp"]),
            r["msg_id"], r["uniq_key"], r["tags"], r["keys"], r["body_size"]) for r in shown])
    print(f"\n{len(rows)} match(es) in {args.archive_dir}")
    return 0

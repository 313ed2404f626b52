"""`python -m store verify DIR [--json] [--progress] [--index-sample N]`: CRC of every record,
consume queue and index consistency (read-only); exit 0 clean, 1 damage, 2 usage."""
from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

from store.readonly import StoreReader
from common.text_output import Progress
from store.readonly.verify import verify_store
from store.cli.tool_common import EXIT_DAMAGE, EXIT_OK, add_command, emit, nonneg_int, progress_enabled


def register(sub: Any) -> None:
    sp = add_command(sub, "verify",
                     "check CRCs, consume queues and index (read-only); exit 1 on damage")
    sp.add_argument("--json", action="store_true", help="one JSON document")
    sp.add_argument("--index-sample", type=nonneg_int, default=1000, metavar="N",
                    help="records whose keys are looked up in the index (0: all; default 1000)")
    sp.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    with StoreReader(args.dir) as reader:
        report = verify_store(reader, index_sample=args.index_sample,
                              progress=Progress(progress_enabled(args)))
    if args.json:
        emit(json.dumps(report, indent=2))
    else:
        print_verify(report)
    return EXIT_OK if report["ok"] else EXIT_DAMAGE


def print_verify(report: dict[str, Any]) -> None:
    cl = report["commitlog"]
    tail = cl["tail"]
    emit(f"store: {report['store']}" + ("  (abort file present: running or crashed)"
                                          if report["live"] else ""))
    emit(f"commitlog: {cl['files']} file(s), {cl['records']} records CRC-checked, offsets "
          f"{cl['min_offset']}..{cl['valid_end']} (valid end {cl['valid_end']}, files end "
          f"{cl['files_end']})")
    if tail["nonzero_bytes_after"]:
        emit(f"  tail: DAMAGED at offset {tail.get('bad_offset')}: {tail['stop_reason']}; "
              f"{tail['bytes_after']} bytes after the valid end, {tail['nonzero_bytes_after']} non-zero")
    else:
        emit("  tail: clean (only zero bytes after the valid end)")
    cq = report["consume_queues"]
    emit(f"consume queues: {cq['queues']} queue(s), {cq['units']} unit(s), "
          f"{cq['units_matching_records']} matched to records, {cq['pending_records']} "
          f"record(s) not dispatched yet")
    ix = report["index"]
    if ix.get("note"):
        emit(f"index: {ix['note']}")
    else:
        emit(f"index: {ix['files']} file(s); {ix['sampled_records']} sampled record(s), "
              f"{ix['keys_checked']} key(s) checked, {ix['keys_missing']} missing")
    issues = report["issues"]
    if issues:
        emit("")
    for issue in issues:
        tag = "DAMAGE " if issue["severity"] == "damage" else "warning"
        emit(f"{tag} [{issue['kind']}] {issue['message']}")
    shown: Counter[str] = Counter()
    for issue in issues:
        shown[issue["kind"]] += issue.get("count", 1)
    for kind, count in {**report["damage_counts"], **report["warning_counts"]}.items():
        if count > shown[kind]:
            emit(f"        ... and {count - shown[kind]} more [{kind}]")
    emit(report["summary"])

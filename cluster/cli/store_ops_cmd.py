"""`python -m cluster stats|flush|cleanup`: store statistics, flush now, and retention's manual
trigger (mqadmin brokerStatus / deleteExpiredCommitLog)."""
from __future__ import annotations

from common.text_output import format_table

from cluster.cli.commands import answer, command
from cluster.cli.output import fmt_ms, table


def register(sub) -> None:
    command(sub, "stats", "store statistics: offsets, put counters, disk usage, topics",
            answer(lambda client, args: client.store_stats(), _show_stats))
    command(sub, "flush", "flush the commitlog, consume queues, index and checkpoint now",
            answer(lambda client, args: client.flush(), _show_flush))
    c = command(sub, "cleanup", "delete expired commitlog files now (retention's manual trigger)",
                answer(lambda client, args: client.trigger_cleanup(args.wait_ms), _show_cleanup))
    c.add_argument("--wait-ms", type=int, default=10_000,
                   help="how long to wait for the first round (default 10000, at most 60000)")


def _ratio(r: float) -> str:
    return "unknown" if r < 0 else f"{r * 100:.1f}%"


def _show_stats(s, args) -> None:
    problems = "; ".join(f"{k}: {v}" for k, v in sorted(s.not_writable.items()))
    rows = [
        ("node", f"{s.node_id} ({s.role})"), ("store", s.store_path),
        ("writable", "true" if s.writable else f"false: {problems}"),
        ("commitlog", f"[{s.min_offset}, {s.max_offset}) in {s.commitlog_files} file(s) of "
                      f"{s.commitlog_file_size} bytes"),
        ("flushed", s.flushed_offset), ("confirm", s.confirm_offset),
        ("dispatched", f"{s.dispatched_offset} ({s.dispatch_behind_bytes} bytes behind)"),
        ("puts", f"{s.put_messages} messages, {s.put_bytes} bytes, {s.put_failures} failed"),
        ("gets", f"{s.get_messages} messages"),
        ("disk usage", f"{_ratio(s.disk_usage_ratio)} ({s.disk_usage_path})"),
        ("delayed", f"{s.schedule_delivered} delivered, {s.schedule_backlog} waiting, lag "
                    f"{s.schedule_lag_ms} ms"),
        ("retention", f"{s.retention_files_deleted} file(s) deleted, last round "
                      f"{fmt_ms(s.retention_last_round_ms)}"),
    ]
    for line in format_table(None, rows):
        print(line)
    print()
    table(("topic", "queues", "messages"), [(t.topic, t.queues, t.messages) for t in s.topics])


def _show_flush(r, args) -> None:
    print(f"flushed: commitlog on disk up to {r.flushed_offset} (max {r.max_offset}), "
          f"dispatched {r.dispatched_offset}, in {r.took_ms} ms")


def _show_cleanup(r, args) -> None:
    if not r.round_done:
        print(f"cleanup triggered: {r.note}")
        return
    print(f"cleanup round: deleted {len(r.deleted_files)} commitlog file(s), "
          f"{r.consume_queue_files_deleted} consume queue file(s), {r.index_files_deleted} index "
          f"file(s); commitlog min offset {r.min_offset_before} -> {r.min_offset_after}; disk "
          f"usage {_ratio(r.disk_usage)}{', forced by disk pressure' if r.forced else ''}")
    for path in r.deleted_files:
        print(f"  deleted {path}")
    for path in r.hanged_files:
        print(f"  still in use, deleted later: {path}")
    if r.note:
        print(r.note)
    print(f"{r.manual_rounds_left} more round(s) will ignore deleteWhen")

"""`python -m cluster group list|create|update|delete|progress|reset-offset` (mqadmin
consumerProgress / updateSubGroup / deleteSubGroup / resetOffsetByTime). The consumer state
lives on the master, so every command goes there (--node master by default)."""
from __future__ import annotations

from common.config_values import arg_bool

from cluster.cli.commands import answer, command, group
from cluster.cli.output import fmt_ms, table
from cluster.cli.timeparse import parse_time_ms


def register(sub) -> None:
    g = group(sub, "group", "consumer groups: list, create, delete, progress, offset reset")
    command(g, "list", "consumer groups and their settings",
            answer(lambda client, args: client.list_groups(), _show_list), prefix="group")
    for name, help in (("create", "create a consumer group (or change it)"),
                       ("update", "change a consumer group's settings")):
        p = command(g, name, help, answer(_upsert, _show_group), prefix="group")
        p.add_argument("name")
        p.add_argument("--fifo", type=arg_bool,
                       help="true: one message group in flight at a time")
        p.add_argument("--retry-max-times", type=int, help="redeliveries before the DLQ (0..1000)")
        p.add_argument("--consume-enable", type=arg_bool,
                       help="false: the group receives nothing")
    rm = command(g, "delete", "delete a consumer group with its offsets",
                 answer(lambda client, args: client.delete_group(args.name),
                        lambda r, args: print(f"deleted group {args.name}")), prefix="group")
    rm.add_argument("name")
    prog = command(g, "progress", "committed offset, max offset, lag and in-flight per queue",
                   answer(lambda client, args: client.consumer_progress(args.name),
                          _show_progress), prefix="group")
    prog.add_argument("name")
    reset = command(g, "reset-offset", "move a group's committed offset (one queue or all)",
                    answer(lambda client, args: client.reset_offset(
                        args.name, args.topic, queue_id=args.queue, offset=args.offset,
                        timestamp_ms=args.time), _show_reset), prefix="group")
    reset.add_argument("name")
    reset.add_argument("--topic", required=True)
    reset.add_argument("--queue", type=int, help="only this queue (default: every queue)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--offset", type=int, help="this queue offset (clamped to [min, max])")
    target.add_argument("--time", type=parse_time_ms, metavar="TIME",
                        help="the first message stored at or after TIME (epoch ms, ISO time, "
                             "now, or ago: 1h)")


def _show_list(r, args) -> None:
    table(("group", "fifo", "retry max", "consume"),
          [(g.name, g.fifo, g.retry_max_times, g.consume_enable) for g in r.groups])
    print(f"\n{len(r.groups)} group(s)")


def _upsert(client, args):
    return client.upsert_group(args.name, fifo=args.fifo, retry_max_times=args.retry_max_times,
                               consume_enable=args.consume_enable)


def _show_group(info, args) -> None:
    print(f"group {info.name}: fifo {str(info.fifo).lower()}, retry max times "
          f"{info.retry_max_times}, consume {'enabled' if info.consume_enable else 'disabled'}")


def _show_progress(r, args) -> None:
    table(("topic", "queue", "committed", "max", "lag", "inflight"),
          [(q.topic, q.queue_id, q.committed_offset, q.max_offset, q.lag, q.inflight)
           for q in r.queues])
    print(f"\ngroup {r.group}: total lag {r.total_lag}, in flight {r.total_inflight}")


def _show_reset(r, args) -> None:
    how = f"offset {args.offset}" if args.offset is not None else f"time {fmt_ms(args.time)}"
    print(f"group {args.name} on {args.topic} reset to {how}:")
    table(("queue", "offset"), [(q.queue_id, q.offset) for q in r.offsets], indent="  ")

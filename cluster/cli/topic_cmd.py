"""`python -m cluster topic list|create|update|delete` (mqadmin topicList / updateTopic /
deleteTopic). Changes go to the master; `list` works on any node (a slave shows its copy)."""
from __future__ import annotations

import argparse

from proto import admin_pb2 as pb

from common.config_values import arg_bool

from cluster.cli.commands import answer, command, group
from cluster.cli.output import table

PERMS = {"W": 2, "R": 4, "RW": 6, "2": 2, "4": 4, "6": 6}


def _perm(text: str) -> int:
    """--perm RW|R|W or RocketMQ's numbers 6|4|2."""
    value = PERMS.get(text.upper())
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r}: want RW, R or W (or 6, 4, 2)")
    return value


def register(sub) -> None:
    topic = group(sub, "topic", "list, create, update and delete topics")
    ls = command(topic, "list", "topics with queue counts and permissions",
                 answer(lambda client, args: client.list_topics(
                     include_system=args.system, with_offsets=args.offsets, topic=args.topic),
                     _show_list), prefix="topic")
    ls.add_argument("--topic", default="", help="only this topic")
    ls.add_argument("--offsets", action="store_true", help="min/max offset of every queue")
    ls.add_argument("--system", action="store_true", help="also the broker's system topics")
    for name, call, help in (
            ("create", lambda client, args: client.create_topic(args.name, **_fields(args)),
             "create a topic (on the master)"),
            ("update", lambda client, args: client.update_topic(args.name, **_fields(args)),
             "change a topic's queue counts, perm or order")):
        p = command(topic, name, help, answer(call, _show_changed(name)), prefix="topic")
        p.add_argument("name")
        p.add_argument("--queues", type=int, help="read and write queue count (1..1024)")
        p.add_argument("--read-queues", type=int, help="read queue count (1..1024)")
        p.add_argument("--write-queues", type=int, help="write queue count (1..1024)")
        p.add_argument("--perm", type=_perm, help="RW (default), R or W")
        p.add_argument("--order", type=arg_bool, help="true or false")
    rm = command(topic, "delete", "remove a topic from the table (data stays until retention)",
                 answer(lambda client, args: client.delete_topic(args.name),
                        lambda r, args: print(f"deleted topic {r.deleted.name}: {r.note}")),
                 prefix="topic")
    rm.add_argument("name")


def _fields(args) -> dict:
    return {"queue_nums": args.queues, "read_queue_nums": args.read_queues,
            "write_queue_nums": args.write_queues, "perm": args.perm, "order": args.order}


def _show_changed(verb: str):
    def show(t: pb.TopicInfo, args) -> None:
        print(f"{verb}d topic {t.name}")
        table(("topic", "read", "write", "perm", "order", "kind"),
              [(t.name, t.read_queue_nums, t.write_queue_nums, t.perm_name, t.order, t.kind)])
    return show


def _show_list(r, args) -> None:
    headers = ["topic", "read", "write", "perm", "order", "kind", "configured"]
    if args.offsets:
        headers.append("messages")
    rows = []
    for t in r.topics:
        row = [t.name, t.read_queue_nums if t.configured else "-",
               t.write_queue_nums if t.configured else "-", t.perm_name, t.order, t.kind,
               t.configured]
        rows.append(row + ([t.messages] if args.offsets else []))
    table(headers, rows)
    if args.offsets:
        for t in r.topics:
            if t.queues:
                print(f"\n{t.name}")
                table(("queue", "min", "max", "messages"),
                      [(q.queue_id, q.min_offset, q.max_offset, q.max_offset - q.min_offset)
                       for q in t.queues], indent="  ")
    print(f"\n{len(r.topics)} topic(s); topic table version {r.data_version_counter}")

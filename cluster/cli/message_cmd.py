"""`python -m cluster message query|dump` (mqadmin queryMsgById / queryMsgByKey /
queryMsgByOffset and printMsg): find messages by id, key or store time, and print records of
a queue in full. Reads work on any node (a slave serves what its master confirmed)."""
from __future__ import annotations

import base64

from proto import admin_pb2 as pb

from cluster.client.admin_client import AdminClient
from cluster.cli.commands import answer, command, group
from cluster.cli.output import fmt_ms, print_json, table
from cluster.cli.timeparse import parse_time_ms

BODY_FORMATS = ("text", "hex", "base64", "none")


def register(sub) -> None:
    m = group(sub, "message", "find messages (id, key, time) and dump queues")
    q = command(m, "query", "messages by --id, by --key, or by --begin/--end store time",
                answer(_query, _show_query), prefix="message")
    q.add_argument("--topic", default="", help="needed for --key and time ranges")
    what = q.add_mutually_exclusive_group()
    what.add_argument("--id", default="", help="offset message id or client message id (UNIQ_KEY)")
    what.add_argument("--key", default="", help="a message key (KEYS) or UNIQ_KEY")
    q.add_argument("--begin", type=parse_time_ms, default=0, metavar="TIME",
                   help="stored at or after TIME (epoch ms, ISO time, now, or ago: 1h)")
    q.add_argument("--end", type=parse_time_ms, default=0, metavar="TIME", help="stored at or before TIME")
    q.add_argument("--queue", type=int, help="time range: only this queue")
    q.add_argument("--max", type=int, default=32, help="at most this many (1..1024)")
    q.add_argument("--full", action="store_true", help="print every field of each message")
    q.add_argument("--body", choices=BODY_FORMATS, default="text", help="how --full prints bodies")
    d = command(m, "dump", "print the records of a queue (or of every queue of a topic)",
                _dump, prefix="message")
    d.add_argument("--topic", required=True)
    d.add_argument("--queue", type=int, help="default: every queue of the topic")
    d.add_argument("--offset", type=int, default=0, help="first queue offset (default 0)")
    d.add_argument("--count", type=int, default=16, help="records per queue (default 16)")
    d.add_argument("--body", choices=BODY_FORMATS, default="text")


def _query(client: AdminClient, args) -> pb.GetMessagesResponse:
    if not (args.id or args.key or args.begin or args.end):
        args.parser.error("give --id, --key or --begin/--end")
    if (args.key or args.begin or args.end) and not args.topic and not args.id:
        args.parser.error("--key and time ranges need --topic")
    return client.query(args.topic, args.key, args.max, msg_id=args.id, begin_ms=args.begin,
                        end_ms=args.end, queue_id=args.queue,
                        omit_body=not args.full and not args.json)


def _show_query(r: pb.GetMessagesResponse, args) -> None:
    if args.full:
        for msg in r.messages:
            print_record(msg, args.body)
    else:
        table(("topic", "queue", "offset", "stored", "msg id", "unique key", "tags", "keys",
               "size"),
              [(x.topic, x.queue_id, x.queue_offset, fmt_ms(x.store_timestamp), x.msg_id,
                x.unique_key, x.tags, x.keys, x.body_size) for x in r.messages])
    more = " (more matched: raise --max or narrow the range)" if r.truncated else ""
    print(f"\n{len(r.messages)} message(s){more}")


def _dump(client: AdminClient, args) -> int:
    if args.count < 1 or args.offset < 0:
        args.parser.error("--count must be >= 1 and --offset >= 0")
    if args.queue is not None:
        queues = [args.queue]
    else:
        info = client.list_topics(topic=args.topic, with_offsets=True, include_system=True)
        queues = [q.queue_id for t in info.topics for q in t.queues]
    dumped: list[pb.Message] = []
    for qid in queues:
        offset, got = args.offset, 0
        while got < args.count:
            r = client.get(args.topic, qid, offset, min(64, args.count - got))
            if r.status == "OFFSET_TOO_SMALL" and r.next_offset > offset:
                offset = r.next_offset  # retention moved the start: dump from there
                continue
            for msg in r.messages[:args.count - got]:
                dumped.append(msg)
                got += 1
                if not args.json:
                    print_record(msg, args.body)
            if not r.messages or r.next_offset <= offset:
                break
            offset = r.next_offset
    if args.json:
        print_json(dumped)
    else:
        print(f"{len(dumped)} record(s) of {args.topic} in queue(s) "
              f"{', '.join(map(str, queues)) or '(none)'}")
    return 0


def print_record(m: pb.Message, body_format: str) -> None:
    print(f"{m.topic} queue {m.queue_id} offset {m.queue_offset}  commitlog {m.commit_log_offset}")
    print(f"  msg id      {m.msg_id}")
    print(f"  unique key  {m.unique_key or '-'}")
    print(f"  tags        {m.tags or '-'}    keys {m.keys or '-'}")
    print(f"  stored      {fmt_ms(m.store_timestamp)} by {m.store_host}")
    print(f"  born        {fmt_ms(m.born_timestamp)} at {m.born_host}")
    print(f"  reconsume   {m.reconsume_times}    sys flag {m.sys_flag}    body crc {m.body_crc}")
    for key in sorted(m.properties):
        print(f"  property    {key}={m.properties[key]}")
    print(f"  body        {m.body_size} bytes{_body(m.body, body_format)}")
    print()


def _body(body: bytes, fmt: str) -> str:
    if fmt == "none" or not body:
        return ""
    if fmt == "hex":
        return ": " + body.hex()
    if fmt == "base64":
        return ": " + base64.b64encode(body).decode("ascii")
    return ": " + repr(body.decode("utf-8", "replace"))

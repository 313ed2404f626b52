"""Smoke-test commands over the Admin API: `send` to the master, `get` and `query` from any node
(slaves serve reads up to their confirm offset). `produce` and `receive` go through the RocketMQ 5
client API instead (consume_cmd.py)."""
from __future__ import annotations

import argparse
import sys

from proto import admin_pb2 as pb

from cluster.client.admin_client import AdminClient
from cluster.cli.commands import command
from cluster.cli.output import print_json


def register(sub) -> None:
    send = command(sub, "send", "send test messages to the master", _send, json_flag=False)
    send.add_argument("--topic", required=True)
    send.add_argument("--body", default="hello", help="body text; {i} is replaced by the number")
    send.add_argument("--count", type=int, default=1)
    send.add_argument("--batch", type=int, default=32, help="messages per SendMessages call")
    send.add_argument("--queue", type=int, default=-1, help="queue id (default: round robin over 4)")
    send.add_argument("--tags", default="")
    send.add_argument("--keys", default="", help="space-separated keys; {i} is replaced too")
    get = command(sub, "get", "read messages of one queue", _get)
    get.add_argument("--topic", required=True)
    get.add_argument("--queue", type=int, default=0)
    get.add_argument("--offset", type=int, default=0)
    get.add_argument("--count", type=int, default=16)
    get.add_argument("--tags", default="", help="tag filter: '*' or 'a||b'")
    query = command(sub, "query", "find messages by key (see also `message query`)", _query)
    query.add_argument("--topic", required=True)
    query.add_argument("--key", required=True)


def print_messages(resp: pb.GetMessagesResponse, as_json: bool) -> None:
    if as_json:
        print_json(resp)
        return
    print(f"{resp.status}: {len(resp.messages)} message(s); next offset {resp.next_offset}, "
          f"queue [{resp.min_offset}, {resp.max_offset})")
    for m in resp.messages:
        body = m.body.decode("utf-8", "replace")
        print(f"  q{m.queue_id}@{m.queue_offset:<6} phys {m.commit_log_offset:<10} id {m.msg_id} "
              f"tags={m.tags!r} keys={m.keys!r} body={body[:60]!r}")


def _get(client: AdminClient, args) -> int:
    print_messages(client.get(args.topic, args.queue, args.offset, args.count, args.tags), args.json)
    return 0


def _query(client: AdminClient, args) -> int:
    print_messages(client.query(args.topic, args.key), args.json)
    return 0


def _send(client: AdminClient, args: argparse.Namespace) -> int:
    if args.count < 1 or args.batch < 1:
        args.parser.error("--count and --batch must be >= 1")
    sent = 0
    last = None
    while sent < args.count:
        n = min(args.batch, args.count - sent)
        batch = [pb.Message(topic=args.topic, body=args.body.replace("{i}", str(i)).encode(),
                            tags=args.tags, keys=args.keys.replace("{i}", str(i)),
                            queue_id=args.queue if args.queue >= 0 else i % 4)
                 for i in range(sent, sent + n)]
        r = client.send(batch)
        if r.status != "PUT_OK":
            print(f"send stopped after {sent} message(s): {r.status} {r.reason}", file=sys.stderr)
            return 1
        sent += n
        last = r.results[-1]
    print(f"sent {sent} message(s) to {args.topic}: last at queue {last.queue_id} offset "
          f"{last.queue_offset}, physical offset {last.commit_log_offset}, id {last.msg_id}")
    return 0

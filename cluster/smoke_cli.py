"""Smoke-test commands over the Admin API: `send` to the master, `get` and `query` from any node
(slaves serve reads up to their confirm offset)."""
from __future__ import annotations

import argparse
import json
import sys

import grpc
from google.protobuf.json_format import MessageToDict

from proto import admin_pb2 as pb

from .admin_client import AdminClient
from .cli_targets import add_target_args

SMOKE_COMMANDS = ("send", "get", "query")


def add_smoke_commands(sub) -> None:
    send = sub.add_parser("send", help="send test messages to the master")
    add_target_args(send, "master")
    send.add_argument("--topic", required=True)
    send.add_argument("--body", default="hello", help="body text; {i} is replaced by the number")
    send.add_argument("--count", type=int, default=1)
    send.add_argument("--batch", type=int, default=32, help="messages per SendMessages call")
    send.add_argument("--queue", type=int, default=-1, help="queue id (default: round robin over 4)")
    send.add_argument("--tags", default="")
    send.add_argument("--keys", default="", help="space-separated keys; {i} is replaced too")
    get = sub.add_parser("get", help="read messages of one queue")
    add_target_args(get, "master")
    get.add_argument("--topic", required=True)
    get.add_argument("--queue", type=int, default=0)
    get.add_argument("--offset", type=int, default=0)
    get.add_argument("--count", type=int, default=16)
    get.add_argument("--tags", default="", help="tag filter: '*' or 'a||b'")
    get.add_argument("--json", action="store_true")
    query = sub.add_parser("query", help="find messages by key")
    add_target_args(query, "master")
    query.add_argument("--topic", required=True)
    query.add_argument("--key", required=True)
    query.add_argument("--json", action="store_true")


def _print_messages(resp: pb.GetMessagesResponse, as_json: bool) -> None:
    if as_json:
        print(json.dumps(MessageToDict(resp), indent=2))
        return
    print(f"{resp.status}: {len(resp.messages)} message(s); next offset {resp.next_offset}, "
          f"queue [{resp.min_offset}, {resp.max_offset})")
    for m in resp.messages:
        body = m.body.decode("utf-8", "replace")
        print(f"  q{m.queue_id}@{m.queue_offset:<6} phys {m.commit_log_offset:<10} id {m.msg_id} "
              f"tags={m.tags!r} keys={m.keys!r} body={body[:60]!r}")


def run_smoke(command: str, address: str, token: str, args) -> int:
    with AdminClient(address, token) as client:
        try:
            if command == "send":
                return _send(client, args)
            if command == "get":
                _print_messages(client.get(args.topic, args.queue, args.offset, args.count,
                                           args.tags), args.json)
            else:
                _print_messages(client.query(args.topic, args.key), args.json)
            return 0
        except grpc.RpcError as e:
            print(f"{command} failed: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1


def _send(client: AdminClient, args: argparse.Namespace) -> int:
    sent = 0
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

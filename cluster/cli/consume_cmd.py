"""Smoke tests through the RocketMQ 5 client API (cluster/client/), the way applications use the
cluster: `produce` sends with a producer (batched SendMessage), `receive` consumes with a
consumer group (ReceiveMessage + AckMessage). Neither needs the admin token: the client API
is authenticated by accessKey/secretKey when the nodes require it.

    python -m cluster produce --topic Demo --count 1000 --tag greeting --keys "order-{i}"
    python -m cluster receive --topic Demo --group DemoGroup --count 10 [--no-ack] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from cluster.client import ClientConfig, ClientError, Connection, Message, Producer, SimpleConsumer
from cluster.client.client_errors import TransportError
from cluster.cli.targets import CURRENT_MASTER, DEFAULT_CLUSTER_DIR, add_tls_args, node_target


def register(sub) -> None:
    produce = _parser(sub, "produce", "send messages through the RocketMQ 5 client API")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--body", default="hello {i}", help="body text; {i} is the number")
    produce.add_argument("--count", type=int, default=1)
    produce.add_argument("--batch", type=int, default=32, help="messages per SendMessage")
    produce.add_argument("--tag", default="")
    produce.add_argument("--keys", default="", help="a key; {i} is replaced by the number")
    produce.set_defaults(run=_produce)
    receive = _parser(sub, "receive", "consume with a consumer group (receive, then ack)")
    receive.add_argument("--topic", required=True)
    receive.add_argument("--group", required=True)
    receive.add_argument("--tags", default="*", help="tag filter: '*' or 'a||b'")
    receive.add_argument("--count", type=int, default=16, help="stop after this many messages")
    receive.add_argument("--wait", type=float, default=5.0,
                         help="seconds to keep polling without a message before stopping")
    receive.add_argument("--invisible", type=float, default=30.0,
                         help="seconds a received message stays invisible to the group")
    receive.add_argument("--no-ack", action="store_true", help="leave the messages unacked")
    receive.add_argument("--json", action="store_true", help="print JSON lines for scripts")
    receive.set_defaults(run=_receive)


def _parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=help)
    p.add_argument("--address", help="host:port of any node (default: --node of --cluster-dir)")
    p.add_argument("--cluster-dir", default=DEFAULT_CLUSTER_DIR)
    p.add_argument("--node", default=CURRENT_MASTER,
                   help=f"node name in the cluster folder (default {CURRENT_MASTER}: the current "
                        f"master; any node serves, a slave forwards to its master)")
    p.add_argument("--access-key", default="")
    p.add_argument("--secret-key", default="")
    add_tls_args(p)
    p.set_defaults(parser=p)
    return p


def _connect(args) -> Connection:
    address, tls = node_target(args)
    return Connection(ClientConfig(address, access_key=args.access_key,
                                   secret_key=args.secret_key, request_timeout=10, tls=tls))


def _produce(args) -> int:
    if args.count < 1 or not 1 <= args.batch <= 1024:
        args.parser.error("--count must be >= 1 and --batch in 1..1024")
    sent, last = 0, None
    started = time.monotonic()
    with _connect(args) as conn:
        producer = Producer(conn)
        try:
            while sent < args.count:
                n = min(args.batch, args.count - sent)
                batch = [Message(args.topic, args.body.replace("{i}", str(i)).encode(),
                                 tag=args.tag or None,
                                 keys=args.keys.replace("{i}", str(i)) or None)
                         for i in range(sent, sent + n)]
                last = producer.send_batch(batch)[-1]
                sent += n
        except (ClientError, TransportError) as e:
            print(f"produce stopped after {sent} message(s): {e}", file=sys.stderr)
            return 1
    took = time.monotonic() - started
    print(f"sent {sent} message(s) to {args.topic} in {took:.2f} s; last id {last.message_id} "
          f"at queue offset {last.offset}")
    return 0


def _receive(args) -> int:
    if args.count < 1 or args.wait < 0:
        args.parser.error("--count must be >= 1 and --wait >= 0")
    got = 0
    with _connect(args) as conn:
        consumer = SimpleConsumer(conn, args.group, {args.topic: args.tags},
                                  await_duration=min(args.wait, 20.0) if args.wait else 0.0,
                                  invisible_duration=args.invisible)
        deadline = time.monotonic() + args.wait
        try:
            while got < args.count:
                batch = consumer.receive(min(32, args.count - got))
                if not batch:
                    if time.monotonic() >= deadline:
                        break
                    continue
                deadline = time.monotonic() + args.wait
                errors = [None] * len(batch) if args.no_ack else consumer.ack_many(batch)
                for m, error in zip(batch, errors):
                    _print(m, error, args.json)
                got += len(batch)
        except (ClientError, TransportError) as e:
            print(f"receive stopped after {got} message(s): {e}", file=sys.stderr)
            return 1
    if not args.json:
        print(f"{got} message(s) from {args.topic} for group {args.group}"
              f"{' (not acked)' if args.no_ack else ''}")
    return 0


def _print(m, ack_error, as_json: bool) -> None:
    body = m.body.decode("utf-8", "replace")
    if as_json:
        print(json.dumps({"message_id": m.message_id, "topic": m.topic, "tag": m.tag,
                          "keys": list(m.keys),
                          "queue_id": m.queue_id, "queue_offset": m.queue_offset,
                          "delivery_attempt": m.delivery_attempt, "body": body,
                          "acked": ack_error is None, "ack_error": str(ack_error or "")}))
        return
    note = f"  ack failed: {ack_error}" if ack_error is not None else ""
    print(f"  q{m.queue_id}@{m.queue_offset:<6} id {m.message_id} attempt {m.delivery_attempt} "
          f"tag={m.tag!r} body={body[:60]!r}{note}")

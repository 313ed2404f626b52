"""A steady load on a real cluster for the console's charts, as a process of its own (the
browser tests and the screenshot script start it and end it by its pid):

    python -m tests.console.load --address HOST:PORT --topic T --rate 200 --seconds 60 \
        [--group G] [--stalled-group S]

It sends `--rate` messages a second in batches ten times a second through the RocketMQ 5
client API (cluster/client/), for at most `--seconds`; `--group` consumes them (receive and
ack) as they come; `--stalled-group` receives and acks the first batch once and then nothing,
so its lag grows with every send (the console's lag_growing highlight). Prints one JSON line
{"ready": true} once the stalled group has consumed, then one line a second with the counts.
Bounded in time and count; a refused send or receive is counted and retried, not fatal (a
failover may be under way).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from cluster.client import ClientConfig, ClientError, Connection, Message, Producer, SimpleConsumer
from cluster.client.client_errors import TransportError

ERRORS = (ClientError, TransportError)


class Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent = self.received = self.errors = 0

    def add(self, **kw: int) -> None:
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)

    def line(self) -> str:
        with self.lock:
            return json.dumps({"sent": self.sent, "received": self.received,
                               "errors": self.errors})


def produce(conn: Connection, topic: str, rate: int, deadline: float, counts: Counts,
            stop: threading.Event) -> None:
    producer = Producer(conn)
    per_tick = max(1, rate // 10)
    tick = time.monotonic()
    i = 0
    while not stop.is_set() and time.monotonic() < deadline:
        batch = [Message(topic, f"load {i + j}".encode(), keys=f"load-{i + j}")
                 for j in range(per_tick)]
        try:
            producer.send_batch(batch)
            counts.add(sent=len(batch))
            i += len(batch)
        except ERRORS:
            counts.add(errors=1)
        tick += 0.1
        stop.wait(max(0.0, tick - time.monotonic()))


def consume(conn: Connection, topic: str, group: str, deadline: float, counts: Counts,
            stop: threading.Event) -> None:
    consumer = SimpleConsumer(conn, group, {topic: "*"}, await_duration=1.0)
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            batch = consumer.receive(32)
            if batch:
                consumer.ack_many(batch)
                counts.add(received=len(batch))
        except ERRORS:
            counts.add(errors=1)
            stop.wait(0.2)


def consume_once(conn: Connection, topic: str, group: str, deadline: float) -> None:
    """Receive and ack one batch: the group now has consumed from the topic, and its lag
    counts every later message."""
    consumer = SimpleConsumer(conn, group, {topic: "*"}, await_duration=2.0)
    while time.monotonic() < deadline:
        try:
            batch = consumer.receive(32)
        except ERRORS:
            time.sleep(0.2)
            continue
        if batch:
            consumer.ack_many(batch)
            return
    raise SystemExit(f"the stalled group {group} received nothing")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.console.load", description=__doc__)
    p.add_argument("--address", required=True, help="host:port of a node")
    p.add_argument("--topic", required=True)
    p.add_argument("--rate", type=int, default=200, help="messages a second (10..10000)")
    p.add_argument("--seconds", type=float, default=60.0, help="stop after this long (<= 1800)")
    p.add_argument("--group", default="", help="a consumer group that keeps up")
    p.add_argument("--stalled-group", default="", help="a consumer group that stops after "
                                                       "its first batch")
    args = p.parse_args(argv)
    if not 10 <= args.rate <= 10_000 or not 0 < args.seconds <= 1800:
        p.error("--rate must be in 10..10000 and --seconds in (0, 1800]")
    deadline = time.monotonic() + args.seconds
    counts, stop = Counts(), threading.Event()
    with Connection(ClientConfig(args.address, request_timeout=10)) as conn:
        threads = [threading.Thread(target=produce, daemon=True,
                                    args=(conn, args.topic, args.rate, deadline, counts, stop))]
        threads[0].start()
        if args.stalled_group:
            consume_once(conn, args.topic, args.stalled_group, deadline)
        if args.group:
            threads.append(threading.Thread(target=consume, daemon=True,
                                            args=(conn, args.topic, args.group, deadline,
                                                  counts, stop)))
            threads[-1].start()
        print(json.dumps({"ready": True}), flush=True)
        try:
            while any(t.is_alive() for t in threads):
                time.sleep(1.0)
                print(counts.line(), flush=True)
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            for t in threads:
                t.join(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())

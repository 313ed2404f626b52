"""The master's work per message on a batched SendMessage, step by step, in one process.

One SendMessageRequest of `--batch` 1 KiB messages as our client builds it (a tag, a key, an
id, a born timestamp) goes through each step of the send path separately, repeated until each
figure is stable, and each step's time per message is printed next to the floor it stands on:

    parse              SendMessageRequest.FromString (what gRPC's deserializer does)
    read the fields    every field the conversion reads, read once (upb attribute access):
                       the floor of `convert`
    convert            cluster.v2.convert.to_store_messages (checks + store Message)
    store checks       store.validation.check_message per message
    encode             store.codec.encode per message
    dispatch hint      store.codec.dispatch.dispatch_hint per message
    append             MessageStore.append of the batch into a real store in a temp dir
                       (checks, encode, hint, the commitlog copy; ASYNC_FLUSH, loaded but
                       no service running, so nothing else takes the GIL)
    answer             cluster.messaging.send.send_response + SerializeToString
    reput              ReputService.catch_up over 250 such appends (a master's records,
                       with their hints), consume queues only (its own thread on a node)

No gRPC and no event loop: what is left of a node's CPU per message (`bench_messaging`,
`compare`) above the sum of these is the transport, asyncio, the index process's pipe and
the flush and prefault threads.

    .venv/bin/python -m tests.perf.send_steps [--batch 128] [--seconds 0.5]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Callable

from cluster.client.message import Message as ClientMessage
from cluster.client.message import to_v2
from cluster.v2.convert import SendLimits, to_store_messages
from cluster.messaging.send import send_response
from proto.apache.rocketmq.v2 import service_pb2 as s
from store import codec
from store.codec.dispatch import dispatch_hint
from store.validation import check_message
from tests.perf.bench_store import open_store

BODY = os.urandom(1024)
STORE_HOST = "127.0.0.1:10911"


def per_message(fn: Callable[[], object], batch: int, seconds: float) -> float:
    """µs per message of fn() (which handles one batch): the best of 5 timed runs."""
    fn()
    best = float("inf")
    for _ in range(5):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds / 5:
                break
        best = min(best, elapsed / n / batch * 1e6)
    return best


def request(batch: int) -> bytes:
    req = s.SendMessageRequest()
    for i in range(batch):
        to_v2(ClientMessage("BenchTopic", BODY, tag="bench", keys=f"k-{i}"), out=req.messages.add())
    return req.SerializeToString()


def read_fields(messages) -> None:
    for m in messages:
        sp = m.system_properties
        (sp.message_type, m.body, sp.body_encoding, m.user_properties, sp.tag, list(sp.keys),
         sp.message_id, sp.message_group, sp.trace_context, sp.born_timestamp.seconds,
         sp.born_timestamp.nanos, sp.born_host, sp.HasField("lite_topic"),
         sp.HasField("delivery_timestamp"), m.topic)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=0.5, help="per figure")
    args = parser.parse_args(argv)
    batch, seconds = args.batch, args.seconds
    raw = request(batch)
    parsed = s.SendMessageRequest.FromString(raw)
    messages = parsed.messages
    limits = SendLimits(max_body=4 * 1024 * 1024, max_delay_ms=3 * 86_400_000)
    now = int(time.time() * 1000)
    _, msgs = to_store_messages(messages, limits, now, "127.0.0.1")
    known: set[str] = set()
    records = [codec.encode(m, store_host=STORE_HOST) for m in msgs]
    root = tempfile.mkdtemp(prefix="send-steps-")
    store = open_store(os.path.join(root, "append"), start=False, message_index_enable=False)
    reput_store = open_store(os.path.join(root, "reput"), start=False,
                             message_index_enable=False)
    try:
        result = store.append(msgs)
        for _ in range(250):
            reput_store.append(msgs)
        start = time.perf_counter()
        dispatched = reput_store.reput.catch_up()
        reput_us = (time.perf_counter() - start) / dispatched * 1e6
        rows = [
            ("parse", per_message(lambda: s.SendMessageRequest.FromString(raw), batch, seconds)),
            ("read the fields (floor of convert)",
             per_message(lambda: read_fields(messages), batch, seconds)),
            ("convert", per_message(lambda: to_store_messages(messages, limits, now, "127.0.0.1"),
                                    batch, seconds)),
            ("store checks", per_message(
                lambda: [check_message(m, max_body=4 << 20, known_topics=known) for m in msgs],
                batch, seconds)),
            ("encode", per_message(lambda: [codec.encode(m, store_host=STORE_HOST) for m in msgs],
                                   batch, seconds)),
            ("dispatch hint", per_message(
                lambda: [dispatch_hint(m, r) for m, r in zip(msgs, records)], batch, seconds)),
            ("append (checks, encode, hint, copy)",
             per_message(lambda: store.append(msgs), batch, seconds)),
            ("answer", per_message(lambda: send_response(result, msgs).SerializeToString(),
                                   batch, seconds)),
            ("reput (consume queues)", reput_us),
        ]
    finally:
        store.shutdown()
        reput_store.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    print(f"send path, one request of {batch} x 1 KiB messages, µs per message "
          f"(best of 5 runs of {seconds / 5:.2f} s each)")
    for name, us in rows:
        print(f"  {name:<38} {us:7.2f}")
    steps = dict(rows)
    total = (steps["parse"] + steps["convert"] + steps["append (checks, encode, hint, copy)"]
             + steps["answer"] + steps["reput (consume queues)"])
    print(f"  {'parse + convert + append + answer + reput':<38} {total:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

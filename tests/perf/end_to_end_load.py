"""End-to-end latency of bench_messaging: one producer process sending stamped single messages
at a fixed rate (compare_clients.paced_produce, as the compare's end-to-end workload does) while
one SimpleConsumer in this process receives up to `batch` and acks each answer before the next
receive.

Besides send-to-receive, each message's store timestamp splits it in two: sent -> stored (the
producer's call up to the append) and stored -> received (dispatch, the consumer's cycle, the
receive call). For the messages stored before the receive that delivered them began, the wait
for that receive and the receive itself are split again: with a consumer that receives and
acks in turn, a message usually arrives while the previous answer is being streamed or acked.
Store timestamps have millisecond resolution, so the split figures are good to about 0.5 ms.
"""
from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass, field

from cluster.client import SimpleConsumer

from .compare_clients import MAGIC, STAMP, paced_produce, prepare
from .messaging_load import connect


@dataclass
class EndToEnd:
    latency_ms: list[float] = field(default_factory=list)  # sent -> received
    sent_to_stored_ms: list[float] = field(default_factory=list)
    stored_to_received_ms: list[float] = field(default_factory=list)
    waited_for_receive_ms: list[float] = field(default_factory=list)  # stored before it began
    receive_ms: list[float] = field(default_factory=list)  # calls that returned messages
    messages: int = 0

    @property
    def per_receive(self) -> float:
        return self.messages / max(1, len(self.receive_ms))


def end_to_end(endpoint: str, topic: str, count: int, rate: float, batch: int = 32,
               warmup_share: float = 0.1) -> EndToEnd:
    """`count` messages at `rate` per second; the first `warmup_share` are not counted."""
    spec = {"kind": "ours", "address": endpoint}
    prepare(spec, topic, "e2e-group")
    start_at = time.time() + 1.0
    producer = multiprocessing.get_context("spawn").Process(
        target=paced_produce, args=(spec, topic, count, rate, start_at), daemon=True)
    producer.start()
    out = EndToEnd()
    skip = int(count * warmup_share)
    deadline = time.monotonic() + count / rate + 60
    try:
        with connect(endpoint) as conn:
            consumer = SimpleConsumer(conn, "e2e-group", {topic: "*"}, await_duration=1)
            seen = 0
            while seen < count and time.monotonic() < deadline:
                began = time.time()
                got = consumer.receive(batch, 30)
                now = time.time()
                for m in got:
                    magic, sent, seq = STAMP.unpack_from(m.body)
                    if magic != MAGIC:
                        continue  # the topic's warm message
                    seen += 1
                    if seq < skip:
                        continue
                    stored = m.store_timestamp_ms / 1000.0
                    out.latency_ms.append((now - sent) * 1000)
                    out.sent_to_stored_ms.append((stored - sent) * 1000)
                    out.stored_to_received_ms.append((now - stored) * 1000)
                    if stored < began:
                        out.waited_for_receive_ms.append((began - stored) * 1000)
                    out.messages += 1
                if got:
                    out.receive_ms.append((now - began) * 1000)
                    consumer.ack_many(got)
    finally:
        producer.join(30)
        if producer.is_alive():
            producer.kill()
            producer.join()
    if seen < count:
        raise RuntimeError(f"{topic}: {seen} of {count} stamped messages received")
    return out

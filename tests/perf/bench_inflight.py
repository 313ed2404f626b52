"""Receives while many deliveries are in flight: one consumer group takes messages and never
acks them, so every receive plans against a growing set of invisible deliveries.

    python -m tests.perf.bench_inflight [--quick] [--messages N] [--batch 32]

An ASYNC_MASTER node process (tests/integration/harness, default store settings) is filled
with N messages (default 40,000; `--quick` 12,000) on one topic; one SimpleConsumer then calls
receive(`--batch`) with a 300 s invisibility until it has received all but the last batch,
acking nothing. Printed: the receive latency p50 / p99 in bands of in-flight count, the first
band (almost nothing in flight) being the baseline of the same run, and the ratio of each band
to it. A receive that sorts or scans every delivery in flight shows a ratio growing with the
count; one that looks only at what it hands out stays near 1.

Not a test: nothing asserts on time; the machine is shared.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time

from cluster.client import SimpleConsumer
from tests.integration.harness import Group

from . import messaging_load as load
from .bench_store import percentile

TOPIC = "BenchInflight"


def measure(address: str, messages: int, batch: int) -> list[tuple[int, float]]:
    """(deliveries in flight before the call, its latency in ms) per receive."""
    samples: list[tuple[int, float]] = []
    with load.connect(address) as conn:
        consumer = SimpleConsumer(conn, "bench-inflight", {TOPIC: "*"}, await_duration=0)
        held = 0
        while held < messages - batch:
            t0 = time.perf_counter()
            got = consumer.receive(batch, 300)
            samples.append((held, (time.perf_counter() - t0) * 1000))
            if not got:
                raise RuntimeError(f"receive returned nothing with {held} of {messages} held")
            held += len(got)
    return samples


def report(samples: list[tuple[int, float]], messages: int, bands: int = 4) -> None:
    width = messages // bands
    rows = []
    for b in range(bands):
        lo, hi = b * width, (b + 1) * width
        ms = [x for held, x in samples if lo <= held < hi]
        if ms:
            rows.append((f"{lo:,}-{hi:,}", percentile(ms, 50), percentile(ms, 99), len(ms)))
    base = rows[0][1]
    print(f"\n{'in flight':<16} {'p50 ms':>8} {'p99 ms':>8} {'p50 / first':>12} {'receives':>9}")
    for label, p50, p99, n in rows:
        print(f"{label:<16} {p50:>8.2f} {p99:>8.2f} {p50 / base:>12.2f} {n:>9}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.perf.bench_inflight",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="12,000 messages (~30 s)")
    p.add_argument("--messages", type=int, default=0, help="messages to hold (default 40,000)")
    p.add_argument("--batch", type=int, default=32, help="messages per receive")
    args = p.parse_args(argv)
    messages = args.messages or (12_000 if args.quick else 40_000)
    if messages < 4 * args.batch or args.batch < 1:
        p.error("--messages must be at least 4 x --batch, --batch at least 1")
    logging.basicConfig(level=logging.WARNING)
    root = tempfile.mkdtemp(prefix="bench-inflight-")
    group = Group(root)
    try:
        master = group.master("ASYNC_MASTER", mappedFileSizeCommitLog=str(256 << 20))
        print(f"bench_inflight: {messages:,} messages on {TOPIC}, receive({args.batch}) "
              f"with nothing acked", flush=True)
        load.fill(master.address, TOPIC, messages)
        report(measure(master.address, messages, args.batch), messages)
    finally:
        group.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

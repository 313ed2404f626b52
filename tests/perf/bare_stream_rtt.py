"""The floor of a replication round trip: a bare bidirectional gRPC stream between two Python
processes, 1.1 KiB (a 1 KiB message's record) each way, one message in flight, with no store.

    python -m tests.perf.bare_stream_rtt [--count 1500]

The server echoes on a grpc.aio event loop, once with an `async` handler and once with a plain
generator handler (gRPC's own bridge runs it in its thread pool); the client is a synchronous
stub fed by a queue, as a slave's ReplicationClient is. It prints p50 / p90 / p99 of each,
next to which `bench_replication --only latency` shows what the store, the sessions and the
node's threads add (docs/performance/history.md, "Where a SYNC_MASTER's time goes").
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import queue
import time

import grpc
import grpc.aio

PAYLOAD = b"x" * 1100
WARMUP = 300


def _same(data: bytes) -> bytes:
    return data


def _serve(ports: "multiprocessing.Queue[int]", mode: str) -> None:
    async def echo_on_loop(requests, context):
        async for request in requests:
            yield request

    def echo_in_pool(requests, context):
        yield from requests

    async def main() -> None:
        server = grpc.aio.server()
        handler = grpc.stream_stream_rpc_method_handler(
            echo_on_loop if mode == "async" else echo_in_pool,
            request_deserializer=_same, response_serializer=_same)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("bench.Echo", {"Stream": handler}),))
        ports.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()
    asyncio.run(main())


def round_trips(mode: str, count: int) -> list[float]:
    """ms of `count` ping-pongs (after WARMUP) against a server process echoing in `mode`."""
    ports: multiprocessing.Queue = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(ports, mode), daemon=True)
    server.start()
    outbox: queue.Queue = queue.Queue()

    def requests():
        while (item := outbox.get()) is not None:
            yield item
    try:
        with grpc.insecure_channel(f"127.0.0.1:{ports.get(timeout=30)}") as channel:
            stream = channel.stream_stream("/bench.Echo/Stream", request_serializer=_same,
                                           response_deserializer=_same)
            replies = stream(requests())
            out = []
            for i in range(count + WARMUP):
                started = time.perf_counter()
                outbox.put(PAYLOAD)
                next(replies)
                if i >= WARMUP:
                    out.append((time.perf_counter() - started) * 1000)
            return out
    finally:
        outbox.put(None)  # ends the request stream (and gRPC's thread reading it), even on error
        server.kill()
        server.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1500)
    args = parser.parse_args()
    for mode, what in (("async", "async handler on the loop"),
                       ("pool", "plain handler, gRPC's thread-pool bridge")):
        lat = sorted(round_trips(mode, args.count))
        pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
        print(f"bare bidi stream round trip, {what}: p50 {pick(0.5):.3f} ms, "
              f"p90 {pick(0.9):.3f} ms, p99 {pick(0.99):.3f} ms")


if __name__ == "__main__":
    main()

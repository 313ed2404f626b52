"""Times the official RocketMQ 5 Python client (rocketmq-python-client) sending sequentially.

Runs in its own process (its generated modules clash with ours in one process). Reads JSON from
stdin, writes JSON to stdout:

    in:  {"endpoint": "127.0.0.1:P", "topic": "T", "count": 1000, "size": 1024, "warmup": 50}
    out: {"client_version": "5.1.2", "sent": 1000, "errors": 0, "first_error": "",
          "seconds": 1.23, "latencies_ms": [...]}

The producer is started and warmed up (route, telemetry, channel) before the clock starts;
each send is timed on its own.
"""
from __future__ import annotations

import json
import sys
import time
from importlib import metadata


def main() -> int:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    spec = json.loads(sys.stdin.read())
    config = ClientConfiguration(spec["endpoint"], Credentials("", ""), namespace="",
                                 request_timeout=spec.get("request_timeout", 10))
    producer = Producer(config, (spec["topic"],))
    producer.startup()
    body = b"o" * spec.get("size", 1024)
    errors, first_error, latencies = 0, "", []

    def send_one(i: int) -> float:
        msg = Message()
        msg.topic = spec["topic"]
        msg.body = body
        msg.tag = "official"
        msg.keys = f"official-{i}"
        t0 = time.perf_counter()
        producer.send(msg)
        return time.perf_counter() - t0

    try:
        for i in range(spec.get("warmup", 50)):
            send_one(-i - 1)
        start = time.perf_counter()
        for i in range(spec["count"]):
            try:
                latencies.append(send_one(i) * 1000)
            except Exception as e:  # counted and reported, not raised
                errors += 1
                first_error = first_error or f"{type(e).__name__}: {e}"
        seconds = time.perf_counter() - start
    finally:
        producer.shutdown()
    sys.stdout.write(json.dumps({"client_version": metadata.version("rocketmq-python-client"),
                                 "sent": len(latencies), "errors": errors,
                                 "first_error": first_error, "seconds": seconds,
                                 "latencies_ms": latencies}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The official RocketMQ 5 Python client (`rocketmq-python-client`) as a drill's producers, so a
drill measures what operators' applications see, not only what the project's own client sees.

It runs in a process of its own (`python -m cluster.drills.official_producer`): the client ships
generated protobuf modules that clash with ours in one process. Nothing here imports protobuf
code of ours; the message body comes from history.body_for, so the checker matches receives to
these sends as to the workload's own.

    stdin, first line:  {"endpoints": "h:p;h:p;h:p", "topic": "T", "producers": 4,
                         "rate": 60.0, "body_size": 256, "request_timeout": 3.0,
                         "ak": "", "sk": "", "tls": false}
    stdin, later:       "stop" (or end of input): finish the sends in flight and exit
    stdout:             {"ready": true} once every producer started, then one JSON line per
                        send: {"key", "seq", "started", "finished", "ok", "message_id",
                        "queue_id", "offset", "detail"}

Times are time.monotonic(), one clock for every process of the machine (CLOCK_MONOTONIC), so
they line up with the drill's History. The client retries a failed send itself (three attempts
with the same message id) and raises only the last attempt's error, so a send that raised may
have been stored by an earlier attempt: the drill records it as UNKNOWN, never FAILED.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, Callable

from cluster.drills.history import body_for


def _producer(spec: dict[str, Any]):
    from rocketmq import ClientConfiguration, Credentials, Producer

    config = ClientConfiguration(spec["endpoints"], Credentials(spec.get("ak", ""),
                                                                spec.get("sk", "")),
                                 namespace="",
                                 # whole seconds: the client passes it where an int is needed
                                 request_timeout=max(1, round(spec.get("request_timeout", 3))))
    producer = Producer(config, (spec["topic"],), tls_enable=bool(spec.get("tls", False)))
    producer.startup()
    return producer


def _produce(index: int, producer, spec: dict[str, Any], stop: threading.Event,
             emit: Callable[[dict[str, Any]], None]) -> None:
    from rocketmq import Message

    interval = 1.0 / float(spec.get("rate", 60.0))
    next_at = time.monotonic()
    seq = 0
    while not stop.is_set():
        key = f"o{index}-{seq}"
        msg = Message()
        msg.topic = spec["topic"]
        msg.body = body_for(key, int(spec.get("body_size", 256)))
        msg.keys = key
        started = time.monotonic()
        line: dict[str, Any] = {"key": key, "seq": seq, "started": started}
        try:
            receipt = producer.send(msg)
            line.update(ok=True, message_id=receipt.message_id or "",
                        # the client's MessageQueue shows its id only as "broker.topic.id"
                        queue_id=int(str(receipt.message_queue).rpartition(".")[2]),
                        offset=receipt.offset,
                        detail="")
        except Exception as e:  # noqa: BLE001 - every failure is a recorded outcome
            line.update(ok=False, message_id=msg.message_id or "", queue_id=-1, offset=-1,
                        detail=f"{type(e).__name__}: {e}"[:300])
        line["finished"] = time.monotonic()
        emit(line)
        seq += 1
        next_at = max(next_at + interval, time.monotonic() - 1.0)
        delay = next_at - time.monotonic()
        if delay > 0:
            stop.wait(delay)


def main() -> int:
    spec = json.loads(sys.stdin.readline())
    out_lock = threading.Lock()

    def emit(obj: dict[str, Any]) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()

    producers = [_producer(spec) for _ in range(int(spec.get("producers", 4)))]
    stop = threading.Event()
    threads = [threading.Thread(target=_produce, args=(i, p, spec, stop, emit), daemon=True,
                                name=f"official-producer-{i}")
               for i, p in enumerate(producers)]
    emit({"ready": True})
    for t in threads:
        t.start()
    for line in sys.stdin:  # "stop" or the end of input ends the run
        if line.strip() == "stop":
            break
    stop.set()
    for t in threads:
        t.join(float(spec.get("request_timeout", 3.0)) * 4 + 5)
    for p in producers:
        try:
            p.shutdown()
        except Exception:  # noqa: BLE001 - the run's records are out already
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

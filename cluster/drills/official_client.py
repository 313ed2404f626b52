"""The official RocketMQ 5 Python client (`rocketmq-python-client`) as a drill's producers and
consumers, so a drill measures what operators' applications see, not only what the project's
own client sees.

It runs in a process of its own (`python -m cluster.drills.official_client`): the client ships
generated protobuf modules that clash with ours in one process. Nothing here imports protobuf
code of ours; the message body comes from history.body_for / key_of, so the checker matches
these sends and receives with the workload's own.

    stdin, first line:  {"endpoints": "h:p;h:p;h:p", "topic": "T", "producers": 4,
                         "rate": 60.0, "body_size": 256, "request_timeout": 3.0,
                         "group": "G", "consumers": 2, "invisible_s": 10,
                         "ak": "", "sk": ""}
    stdin, later:       "stop producers": the producers finish their sends in flight and end;
                        "stop" (or end of input): everything ends
    stdout:             {"ready": true} once every client started, then one JSON line per
                        event: {"kind": "send", "key", "seq", "started", "finished", "ok",
                        "message_id", "queue_id", "offset", "broker", "detail"} |
                        {"kind": "receive", "key", "message_id", "attempt", "at",
                         "endpoints"} |
                        {"kind": "ack", "key", "message_id", "ok", "at", "detail"}

The consumers are SimpleConsumers (receive up to 16, long polling 1 s; ack each), given the
same endpoints; the client's Message has no queue or offset, so their receives carry -1 there.

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

from cluster.drills.history import body_for, key_of

Emit = Callable[[dict[str, Any]], None]


def _config(spec: dict[str, Any]):
    from rocketmq import ClientConfiguration, Credentials

    return ClientConfiguration(spec["endpoints"], Credentials(spec.get("ak", ""),
                                                              spec.get("sk", "")),
                               namespace="",
                               # whole seconds: the client passes it where an int is needed
                               request_timeout=max(1, round(spec.get("request_timeout", 3))))


def _producer(spec: dict[str, Any]):
    from rocketmq import Producer

    producer = Producer(_config(spec), (spec["topic"],))
    producer.startup()
    return producer


def _consumer(spec: dict[str, Any]):
    from rocketmq import FilterExpression, SimpleConsumer

    consumer = SimpleConsumer(_config(spec), spec["group"],
                              {spec["topic"]: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    return consumer


def _consume(consumer, spec: dict[str, Any], stop: threading.Event, emit: Emit) -> None:
    invisible = int(spec.get("invisible_s", 10))
    while not stop.is_set():
        try:
            got = consumer.receive(16, invisible)
        except Exception:  # noqa: BLE001 - a failed receive is retried, as an application would
            stop.wait(0.1)
            continue
        now = time.monotonic()
        for m in got:
            emit({"kind": "receive", "key": key_of(m.body), "message_id": m.message_id or "",
                  "attempt": m.delivery_attempt or 1, "at": now,
                  # the endpoints of the group that delivered it ("h:p,h:p")
                  "endpoints": str(m.endpoints or "")})
        for m in got:
            try:
                consumer.ack(m)
                ok, detail = True, ""
            except Exception as e:  # noqa: BLE001 - recorded: the checker counts redeliveries
                ok, detail = False, f"{type(e).__name__}: {e}"[:300]
            key = key_of(m.body)
            if key is not None:
                emit({"kind": "ack", "key": key, "message_id": m.message_id or "", "ok": ok,
                      "at": time.monotonic(), "detail": detail})


def _produce(index: int, producer, spec: dict[str, Any], stop: threading.Event,
             emit: Emit) -> None:
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
        line: dict[str, Any] = {"kind": "send", "key": key, "seq": seq, "started": started}
        try:
            receipt = producer.send(msg)
            queue = str(receipt.message_queue)
            line.update(ok=True, message_id=receipt.message_id or "",
                        broker=queue.split(".")[0],  # the group that stored it
                        # the client's MessageQueue shows its id only as "broker.topic.id"
                        queue_id=int(str(receipt.message_queue).rpartition(".")[2]),
                        offset=receipt.offset,
                        detail="")
        except Exception as e:  # noqa: BLE001 - every failure is a recorded outcome
            line.update(ok=False, message_id=msg.message_id or "", queue_id=-1, offset=-1,
                        broker="",  # the client does not say which queue its last try used
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

    producers = [_producer(spec) for _ in range(int(spec.get("producers", 0)))]
    consumers = [_consumer(spec) for _ in range(int(spec.get("consumers", 0)))]
    producing, consuming = threading.Event(), threading.Event()
    senders = [threading.Thread(target=_produce, args=(i, p, spec, producing, emit),
                                daemon=True, name=f"official-producer-{i}")
               for i, p in enumerate(producers)]
    readers = [threading.Thread(target=_consume, args=(c, spec, consuming, emit), daemon=True,
                                name=f"official-consumer-{i}")
               for i, c in enumerate(consumers)]
    emit({"ready": True})
    for t in senders + readers:
        t.start()
    wait = float(spec.get("request_timeout", 3.0)) * 4 + 5
    for line in sys.stdin:
        command = line.strip()
        if command in ("stop producers", "stop"):
            producing.set()
            for t in senders:
                t.join(wait)
        if command == "stop":
            break
    producing.set()
    consuming.set()
    for t in senders + readers:
        t.join(wait)
    for c in producers + consumers:
        try:
            c.shutdown()
        except Exception:  # noqa: BLE001 - the run's records are out already
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

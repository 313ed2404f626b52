"""Drives the official RocketMQ 5 Python client's Producer and SimpleConsumer against our nodes.

Runs as a script in its own process (its generated modules clash with ours in one process).
Reads JSON from stdin, runs the steps in order, writes JSON to stdout:

    in:  {"endpoint": "127.0.0.1:P", "tls": false, "steps": [
            {"op": "send", "topic": "T", "messages": [{"body": "...", "tag": "a", "keys": ["k"],
                                                       "delay_ms": 2000}]},
            {"op": "send", "topic": "T", "for_s": 15, "interval_s": 0.05, "prefix": "f"},
            {"op": "receive", "group": "G", "topic": "T", "tags": "*", "count": 3,
             "invisible_s": 10, "ack": true, "within_s": 20, "await_s": 2},
            {"op": "push", "group": "P", "topic": "T", "count": 4, "fail_once": ["x"]}]}
    out: {"client_version": "5.1.2", "steps": [{"sent": [{"message_id": ..., "sent_at_ms": ...,
                                                          "body", "broker", "queue_id"} |
                                                         {"body", "error": ...}]} |
                    {"received": [{"body", "tag", "keys", "message_id", "delivery_attempt",
                                   "properties", "received_at_ms", "endpoints"}],
                     "ack_errors": [...]}]}

A send step with "for_s" sends one message after another (bodies <prefix>0, <prefix>1, ...,
`interval_s` apart) until that many seconds passed; "broker" and "queue_id" are the queue the
client's receipt names (after its retries), "endpoints" the addresses a message came from.

A receive step calls SimpleConsumer.receive until `count` messages arrived (with "distinct":
true, `count` distinct bodies: a redelivery does not count) or `within_s` passed (then returns
what it has; the test asserts). One consumer per (group, topic, tags),
kept across steps; everything is shut down at the end. With "errors_end_step": true a receive
step whose consumer cannot start or receive ends there, its error in ack_errors ("startup: ..."
or "receive: ..."), instead of failing the tool. "tls": true opens the client's channels
with tls_enable=True (it then trusts gRPC's default roots: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH in
the environment names the test's CA).
"""
from __future__ import annotations

import json
import sys
import time

from official_tools import client_config, client_version, to_message


def push(config, step: dict) -> dict:
    """A PushConsumer (QueryAssignment + ReceiveMessage with auto_renew + Ack, and
    ChangeInvisibleDuration for a nack): consumes until `count` deliveries were seen; the bodies
    in `fail_once` fail their first delivery."""
    import threading
    from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

    seen, lock = [], threading.Lock()

    class Listener(MessageListener):
        def consume(self, message):
            body = message.body.decode()
            with lock:
                seen.append({"body": body, "delivery_attempt": message.delivery_attempt})
            if body in step.get("fail_once", []) and message.delivery_attempt == 1:
                return ConsumeResult.FAILURE
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(config, step["group"], Listener(),
                            {step["topic"]: FilterExpression(step.get("tags", "*"))},
                            tls_enable=step.get("tls", False))
    consumer.startup()
    try:
        deadline = time.monotonic() + step.get("within_s", 30)
        while time.monotonic() < deadline:
            with lock:
                if len(seen) >= step["count"]:
                    break
            time.sleep(0.1)
        time.sleep(step.get("settle_s", 1))  # let the last acks go out
    finally:
        consumer.shutdown()
    with lock:
        return {"received": list(seen), "ack_errors": []}


def outgoing(step: dict):
    """The messages of a send step: its list, or (with "for_s") generated until time is up."""
    if "for_s" not in step:
        yield from step["messages"]
        return
    deadline, i = time.monotonic() + step["for_s"], 0
    while time.monotonic() < deadline:
        yield {"body": f"{step.get('prefix', 'm')}{i}"}
        i += 1
        time.sleep(step.get("interval_s", 0.05))


def send(producer, topic: str, m: dict) -> dict:
    """One send; the receipt's message id and queue, or the error."""
    try:
        receipt = producer.send(to_message(topic, m))
    except Exception as e:  # reported to the test
        return {"body": m["body"], "error": f"{type(e).__name__}: {e}"}
    queue = str(receipt.message_queue)  # "<broker name>.<topic>.<queue id>"
    return {"body": m["body"], "message_id": receipt.message_id,
            "sent_at_ms": int(time.time() * 1000), "broker": queue.split(".", 1)[0],
            "queue_id": int(queue.rsplit(".", 1)[1])}


def main() -> int:
    from rocketmq import FilterExpression, Producer, SimpleConsumer

    spec = json.loads(sys.stdin.read())
    config = client_config(spec)
    tls = bool(spec.get("tls", False))
    producers: dict[str, Producer] = {}
    consumers: dict[tuple, SimpleConsumer] = {}
    out = []
    try:
        for step in spec["steps"]:
            if step["op"] == "send":
                producer = producers.get(step["topic"])
                if producer is None:
                    producer = producers[step["topic"]] = Producer(config, (step["topic"],),
                                                                   tls_enable=tls)
                    producer.startup()
                out.append({"sent": [send(producer, step["topic"], m)
                                     for m in outgoing(step)]})
            elif step["op"] == "receive":
                key = (step["group"], step["topic"], step.get("tags", "*"))
                consumer = consumers.get(key)
                if consumer is None:
                    consumer = SimpleConsumer(
                        config, step["group"], {step["topic"]: FilterExpression(key[2])},
                        await_duration=step.get("await_s", 2), tls_enable=tls)
                    try:
                        consumer.startup()
                    except Exception as e:  # reported to the test (e.g. an ACL refusal)
                        if not step.get("errors_end_step"):
                            raise
                        out.append({"received": [], "ack_errors": [
                            f"startup: {type(e).__name__}: {e}"]})
                        continue
                    consumers[key] = consumer
                received, ack_errors = [], []
                deadline = time.monotonic() + step.get("within_s", 20)

                def missing() -> int:
                    got = {m["body"] for m in received} if step.get("distinct") else received
                    return step["count"] - len(got)
                while missing() > 0 and time.monotonic() < deadline:
                    try:
                        batch = consumer.receive(missing(),
                                                 step.get("invisible_s", 10)) or []
                    except Exception as e:  # reported to the test (e.g. an ACL refusal)
                        if step.get("errors_end_step"):
                            ack_errors.append(f"receive: {type(e).__name__}: {e}")
                            break
                        raise
                    for m in batch:
                        received.append({
                            "body": m.body.decode(), "tag": m.tag, "keys": list(m.keys or []),
                            "message_id": m.message_id, "delivery_attempt": m.delivery_attempt,
                            "properties": dict(m.properties or {}),
                            "received_at_ms": int(time.time() * 1000),
                            "endpoints": str(m.endpoints)})
                        if step.get("ack", True):
                            try:
                                consumer.ack(m)
                            except Exception as e:
                                ack_errors.append(f"{type(e).__name__}: {e}")
                out.append({"received": received, "ack_errors": ack_errors})
            elif step["op"] == "push":
                out.append(push(config, {"tls": tls, **step}))
            else:
                raise ValueError(f"unknown op {step['op']!r}")
    finally:
        for consumer in consumers.values():
            consumer.shutdown()
        for producer in producers.values():
            producer.shutdown()
    sys.stdout.write(json.dumps({"client_version": client_version(), "steps": out}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

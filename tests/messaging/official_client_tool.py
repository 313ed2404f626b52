"""Drives the official RocketMQ 5 Python client (rocketmq-python-client) against our nodes.

Runs as a script in its own process: the client's generated modules register the v2 schema
under other file names than ours, so both cannot be loaded in one process. Reads JSON from
stdin, writes JSON to stdout:

    in:  {"runs": [{"endpoint": "127.0.0.1:P", "topic": "T", "ak": "", "sk": "",
                    "messages": [{"body": "...", "tag": "...", "keys": [...],
                                  "properties": {...}, "message_group": "...",
                                  "delay_ms": 1000}]}]}
    out: {"client_version": "5.1.2",
          "runs": [{"receipts": [{"message_id": ..., "offset": ..., "queue_id": ...,
                                  "endpoints": ["host:port", ...]} | {"error": "..."}]}]}

One Producer per run (started, used, shut down). Errors of a send are reported, not raised; a
producer that cannot start reports its error as every message's.
"""
from __future__ import annotations

import json
import sys

from official_tools import client_config, client_version, to_message


def run(spec: dict) -> dict:
    from rocketmq import Producer

    producer = Producer(client_config(spec), (spec["topic"],))
    try:
        producer.startup()
    except Exception as e:  # reported to the test (e.g. an ACL refusal of its route)
        return {"receipts": [{"error": f"{type(e).__name__}: {e}"} for _ in spec["messages"]]}
    receipts = []
    try:
        for m in spec["messages"]:
            try:
                receipt = producer.send(to_message(spec["topic"], m))
                queue = receipt.message_queue.message_queue0()
                receipts.append({"message_id": receipt.message_id, "offset": receipt.offset,
                                 "queue_id": queue.id,
                                 "endpoints": [f"{a.host}:{a.port}"
                                               for a in queue.broker.endpoints.addresses]})
            except Exception as e:  # reported to the test
                receipts.append({"error": f"{type(e).__name__}: {e}"})
    finally:
        producer.shutdown()
    return {"receipts": receipts}


def main() -> int:
    request = json.loads(sys.stdin.read())
    out = {"client_version": client_version(),
           "runs": [run(spec) for spec in request["runs"]]}
    sys.stdout.write(json.dumps(out))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

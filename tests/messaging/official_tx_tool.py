"""Drives the official RocketMQ 5 Python client's transactional Producer against our node.

Runs as a script in its own process (the client's generated modules clash with ours in one
process). Reads JSON from stdin, writes JSON to stdout:

    in:  {"endpoint": "127.0.0.1:P", "topic": "T", "wait_check_s": 20, "orphans": 0}
    out: {"client_version": "5.1.2",
          "sent": {"<body>": {"message_id": ..., "transaction_id": ..., "broker": ...} |
                             {"error": ...}},
          "ended": {"<body>": "ok" | "<error>"},
          "checked": [{"body": ..., "message_id": ..., "topic": ...}, ...]}

Three transactions with one Producer (and its TransactionChecker): "tx-commit" is committed,
"tx-rollback" rolled back, "tx-orphan" left open; the server's check-back reaches the checker,
which answers COMMIT for "tx-orphan" (ROLLBACK for anything else, which must never be asked).
The tool waits until the checker saw "tx-orphan", gives the client's asynchronous
EndTransaction a moment, and shuts the producer down. With "orphans": N, N transactions
"tx-orphan-0" ... are all left open instead (the checker commits each), and the tool waits
until it saw every one; "broker" is the group whose queue took the half message.
"""
from __future__ import annotations

import json
import sys
import threading
import time

from official_tools import client_config, client_version, to_message


def main() -> int:
    from rocketmq import Producer, TransactionChecker, TransactionResolution

    spec = json.loads(sys.stdin.read())
    n = spec.get("orphans", 0)
    plan = [(f"tx-orphan-{i}", None) for i in range(n)] if n else \
        [("tx-commit", "commit"), ("tx-rollback", "rollback"), ("tx-orphan", None)]
    orphans = [body for body, action in plan if action is None]
    checked: list[dict] = []
    orphan_checked = threading.Event()

    class Checker(TransactionChecker):
        def check(self, message):
            body = message.body.decode()
            checked.append({"body": body, "message_id": message.message_id,
                            "topic": message.topic})
            if body.startswith("tx-orphan"):
                if {c["body"] for c in checked} >= set(orphans):
                    orphan_checked.set()
                return TransactionResolution.COMMIT
            return TransactionResolution.ROLLBACK

    producer = Producer(client_config(spec), (spec["topic"],), checker=Checker())
    producer.startup()
    sent, ended = {}, {}
    try:
        for body, action in plan:
            transaction = producer.begin_transaction()
            try:
                receipt = producer.send(to_message(spec["topic"], {"body": body, "tag": "tx",
                                                                   "keys": [body]}), transaction)
                sent[body] = {"message_id": receipt.message_id,
                              "transaction_id": receipt.transaction_id,
                              "broker": str(receipt.message_queue).split(".", 1)[0]}
            except Exception as e:  # reported to the test
                sent[body] = {"error": f"{type(e).__name__}: {e}"}
                continue
            if action is None:
                continue
            try:
                getattr(transaction, action)()
                ended[body] = "ok"
            except Exception as e:
                ended[body] = f"{type(e).__name__}: {e}"
        orphan_checked.wait(spec.get("wait_check_s", 20))
        time.sleep(spec.get("settle_s", 1.0))  # the checker's EndTransaction is asynchronous
    finally:
        producer.shutdown()
    out = {"client_version": client_version(), "sent": sent,
           "ended": ended, "checked": checked}
    sys.stdout.write(json.dumps(out))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

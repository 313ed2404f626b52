"""`python -m cluster node --config broker.conf [--set key=value ...]`: run one node until
SIGTERM or Ctrl-C, then shut down cleanly. Prints one JSON line when it serves:
{"event": "ready", "node_id": ..., "address": ..., "pid": ..., "role": ..., "admin_token": <where>}
"""
from __future__ import annotations

import json
import os
import logging
import signal
import sys
import threading

from store import failpoints
from store.config import parse_properties
from store.errors import StoreError

from cluster.node.node import Node
from cluster.node.node_config import node_config_from_properties


def run_node(config_path: str | None, overrides: list[str]) -> int:
    props: dict[str, str] = {}
    if config_path:
        try:
            with open(config_path, encoding="utf-8") as f:
                props.update(parse_properties(f.read()))
        except OSError as e:
            print(f"cannot read {config_path}: {e}", file=sys.stderr)
            return 2
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"--set {item!r}: want key=value", file=sys.stderr)
            return 2
        props[key.strip()] = value.strip()
    try:
        failpoints.configure()  # a bad RMQSTORE_FAILPOINTS fails the start, not the first hit
        node = Node(node_config_from_properties(props))
        node.start()
    except StoreError as e:
        print(f"cannot start the node: {e}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(json.dumps({"event": "ready", "node_id": node.config.node_id, "address": node.address,
                      "pid": os.getpid(), "role": node.role.name,
                      "admin_token": node.token_source}), flush=True)
    while not stop.wait(1.0):
        pass
    logging.getLogger(__name__).info("signal received: stopping")
    node.stop()
    return 0

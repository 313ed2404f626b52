"""`python -m cluster status`: the nodes and the replication table of a cluster."""
from __future__ import annotations

import json
import os

import grpc
from google.protobuf.json_format import MessageToDict

from .admin_client import AdminClient
from .auth import read_token_file


def cluster_targets(cluster_dir: str | None, addresses: list[str], token_file: str | None) -> tuple[list[str], str]:
    if cluster_dir and not addresses:
        with open(os.path.join(cluster_dir, "cluster.json"), encoding="utf-8") as f:
            info = json.load(f)
        addresses = [n["address"] for n in info["nodes"]]
        token_file = token_file or info["token_file"]
    if not addresses:
        raise SystemExit("give --cluster-dir or --address")
    if not token_file:
        raise SystemExit("give --token-file (the node logs where its token is)")
    return addresses, read_token_file(token_file)


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f}M"


def print_status(addresses: list[str], token: str, as_json: bool = False) -> int:
    statuses, failures = [], 0
    for address in addresses:
        with AdminClient(address, token, timeout=5) as client:
            try:
                statuses.append(client.status())
            except grpc.RpcError as e:
                failures += 1
                statuses.append(None)
                if not as_json:
                    print(f"{address}: unreachable ({e.code().name}: {e.details()})")
    if as_json:
        print(json.dumps([MessageToDict(s, always_print_fields_with_no_presence=True)
                          if s else None for s in statuses], indent=2))
        return 1 if failures else 0
    print(f"{'node':<12} {'role':<12} {'address':<16} {'epoch':>5} {'max':>12} {'flushed':>12} "
          f"{'confirm':>12} {'writable':<8} note")
    for s in statuses:
        if s is None:
            continue
        note = s.not_writable_reason
        if s.role == "SLAVE":
            note = (f"following {s.master_address}" if s.master_connected
                    else f"NOT connected to {s.master_address}: {s.replication_error}")
        print(f"{s.node_id:<12} {s.role:<12} {s.address:<16} {s.epoch:>5} {s.max_offset:>12} "
              f"{s.flushed_offset:>12} {s.confirm_offset:>12} {str(s.writable).lower():<8} {note}")
    for s in statuses:
        if s is None or s.role == "SLAVE":
            continue
        print(f"\nreplication of {s.node_id} (in-sync: {', '.join(s.in_sync_set) or 'none'})")
        if not s.slaves:
            print("  no slaves connected")
        for sl in s.slaves:
            print(f"  {sl.node_id:<12} ack {sl.ack_offset:>12}  flushed {sl.flushed_offset:>12}  "
                  f"lag {_mib(sl.lag_bytes):>8}  {'IN-SYNC' if sl.in_sync else 'out-of-sync':<11} "
                  f"last ack {sl.last_ack_age_ms} ms ago  peer {sl.peer}")
    return 1 if failures else 0

"""`python -m cluster status`: the nodes and the replication table of a cluster."""
from __future__ import annotations

import grpc

from store.broker_role import BrokerRole

from cluster.client.admin_client import AdminClient
from cluster.cli.output import print_json, table
from cluster.cli.targets import DEFAULT_CLUSTER_DIR, cluster_targets, operator


def register(sub) -> None:
    p = sub.add_parser("status", help="print the nodes and the replication table",
                       description="Every node of a cluster folder (or of --address, repeated): "
                                   "role, epoch, offsets, writability, and each master's "
                                   "replication table.")
    p.add_argument("--cluster-dir", default=DEFAULT_CLUSTER_DIR)
    p.add_argument("--address", action="append", default=[])
    p.add_argument("--token-file")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(run=run, parser=p)


def run(args) -> int:
    addresses, token = cluster_targets(args.cluster_dir, args.address, args.token_file)
    return print_status(addresses, token, args.json)


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f}M"


def print_status(addresses: list[str], token: str, as_json: bool = False) -> int:
    statuses, failures = [], 0
    for address in addresses:
        with AdminClient(address, token, timeout=5, operator=operator()) as client:
            try:
                statuses.append(client.status())
            except grpc.RpcError as e:
                failures += 1
                statuses.append(None)
                if not as_json:
                    print(f"{address}: unreachable ({e.code().name}: {e.details()})")
    if as_json:
        print_json([s if s is not None else None for s in statuses])
        return 1 if failures else 0
    rows = []
    for s in statuses:
        if s is None:
            continue
        note = s.not_writable_reason
        if s.role == BrokerRole.SLAVE:
            note = (f"following {s.master_address}" if s.master_connected
                    else f"NOT connected to {s.master_address}: {s.replication_error}")
        rows.append((s.node_id, s.role, s.address, s.epoch, s.max_offset, s.flushed_offset,
                     s.confirm_offset, s.writable, note))
    table(("node", "role", "address", "epoch", "max", "flushed", "confirm", "writable", "note"),
          rows)
    for s in statuses:
        if s is None or s.role == BrokerRole.SLAVE:
            continue
        print(f"\nreplication of {s.node_id} (in-sync: {', '.join(s.in_sync_set) or 'none'})")
        if not s.slaves:
            print("  no slaves connected")
        for sl in s.slaves:
            print(f"  {sl.node_id:<12} ack {sl.ack_offset:>12}  flushed {sl.flushed_offset:>12}  "
                  f"lag {_mib(sl.lag_bytes):>8}  {'IN-SYNC' if sl.in_sync else 'out-of-sync':<11} "
                  f"last ack {sl.last_ack_age_ms} ms ago  peer {sl.peer}")
    return 1 if failures else 0

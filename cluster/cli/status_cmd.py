"""`python -m cluster status`: the nodes and the replication table of a cluster (every broker
group's: node ids are <brokerName>:<brokerId>), and the controller's view of each broker group
when the cluster has one: its master, sync state set, recent elections, and the route the
controller's registry gives clients (the group's endpoints, how many topics its master
registered, and whether it has a master now)."""
from __future__ import annotations

import grpc

from store.broker_role import BrokerRole

from cluster.cli.output import fmt_ms, print_json, table
from cluster.cli.targets import DEFAULT_CLUSTER_DIR, add_tls_args, cluster_targets, operator
from cluster.client.admin_client import AdminClient
from cluster.client.controller_client import ControllerClient
from cluster.assembly.group_topics import nodes_behind
from cluster.assembly.local_cluster import ClusterFolderError, read_cluster_info
from cluster.security.tls import ClientTls


def register(sub) -> None:
    p = sub.add_parser("status", help="print the nodes and the replication table",
                       description="Every node of a cluster folder (or of --address, repeated): "
                                   "role, epoch, offsets, writability, and each master's "
                                   "replication table.")
    p.add_argument("--cluster-dir", default=DEFAULT_CLUSTER_DIR)
    p.add_argument("--address", action="append", default=[])
    p.add_argument("--token-file")
    p.add_argument("--controller", help="host:port of a controller to ask as well")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    add_tls_args(p)
    p.set_defaults(run=run, parser=p)


def run(args) -> int:
    addresses, token, tls = cluster_targets(args.cluster_dir, args.address, args.token_file, args)
    controller = args.controller
    if not controller and not args.address:
        try:
            controller = read_cluster_info(args.cluster_dir).get("controller", {}).get("address")
        except ClusterFolderError:
            controller = None
    status = print_status(addresses, token, args.json, tls)
    if controller and not args.json:
        print_controller(controller, token, tls)
    return status


def print_controller(address: str, token: str, tls: ClientTls | None = None) -> None:
    with ControllerClient(address, token, timeout=5, tls=tls) as client:
        try:
            view = client.groups()
        except grpc.RpcError as e:
            print(f"\ncontroller {address}: unreachable ({e.code().name}: {e.details()})")
            return
    for g in view.groups:
        master = f"{g.master_id} ({g.master_role}, epoch {g.epoch})" if g.master_id else "none"
        print(f"\ncontroller {address}, group {g.broker_name}: master {master}; sync state set "
              f"{', '.join(g.sync_state_set) or 'none'}")
        if g.note:
            print(f"  note: {g.note}")
        for e in list(g.elections)[:3]:
            print(f"  {fmt_ms(e.at_ms)}  epoch {e.epoch}: {e.master_id} "
                  f"(was {e.previous_master_id or 'none'}) {e.reason}")
        for c in list(g.sync_state_changes)[:4]:
            print(f"  {fmt_ms(c.at_ms)}  sync state set {'+' if c.added else '-'}{c.node_id}: "
                  f"{c.reason}")
    route = view.route
    if route.groups:
        print(f"\nroute (version {route.version}): what every node answers QueryRoute with")
        table(("group", "master", "endpoints", "topics"),
              [(g.broker_name, g.master_address or "NONE: read-only", ",".join(g.endpoints),
                len(g.topics) if g.registered else "not registered yet")
               for g in route.groups], indent="  ")
        behind = nodes_behind(view)
        print("  every live node holds this route" if not behind else
              f"  behind (a node takes a new route at its next heartbeat): {'; '.join(behind)}")


def _state(sl) -> str:
    if sl.in_sync:
        return "IN-SYNC"
    return "SLOW (out)" if sl.held_out else "out-of-sync"


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f}M"


def print_status(addresses: list[str], token: str, as_json: bool = False,
                 tls: ClientTls | None = None) -> int:
    statuses, failures = [], 0
    for address in addresses:
        with AdminClient(address, token, timeout=5, operator=operator(), tls=tls) as client:
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
        if s.controller_note:
            note = f"{note}; controller: {s.controller_note}" if note else \
                f"controller: {s.controller_note}"
        if s.role == BrokerRole.SLAVE:
            note = (f"following {s.master_address}" if s.master_connected
                    else f"NOT connected to {s.master_address}: {s.replication_error}")
        if s.acl_problem:
            note = f"{note}; ACL: {s.acl_problem}" if note else f"ACL: {s.acl_problem}"
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
                  f"lag {_mib(sl.lag_bytes):>8}  {_state(sl):<11} "
                  f"ack latency {sl.ack_latency_ms:>6.1f} ms (p99 {sl.ack_latency_p99_ms:.1f})  "
                  f"last ack {sl.last_ack_age_ms} ms ago  peer {sl.peer}")
            if sl.last_change:
                print(f"  {'':<12} {sl.in_sync_changes} in-sync change(s), the last "
                      f"{sl.last_change_age_ms / 1000:.0f} s ago: {sl.last_change}")
    return 1 if failures else 0

"""`python -m cluster switch --to NODE` or `--group NAME` (planned promotion through the
controller) and `python -m cluster role --to ROLE` (a manual SwitchRole, for clusters without a
controller).

NODE is a node id (`broker-a:1`) or a node name of the cluster folder (`slave1`, `b-slave1`).
`--group NAME` alone promotes the member of that group's sync state set the controller finds
most complete (alive, healthy, highest offset, then lowest priority). The controller refuses a
node that is not in the group's sync state set, not alive or unhealthy; a group it does not
know is NOT_FOUND.
"""
from __future__ import annotations

import argparse

import grpc

from store.broker_role import BrokerRole

from cluster.cli.commands import answer, command
from cluster.cli.output import print_json, refused
from cluster.cli.targets import (DEFAULT_CLUSTER_DIR, add_tls_args, controller_target,
                                 node_status_by_name)
from cluster.client.controller_client import ControllerClient

RECENT_MS = 3000  # a slave heard from within this long counts as alive for --group


def register(sub) -> None:
    p = sub.add_parser("switch", help="promote a node of the sync state set (planned failover)",
                       description=__doc__.splitlines()[0])
    p.add_argument("--to", metavar="NODE", help="node id or cluster-folder name (default with "
                                                  "--group: its most complete in-sync slave)")
    p.add_argument("--group", default="", help="broker name (default: the node's group)")
    p.add_argument("--controller", help="host:port of the controller (default: the folder's)")
    p.add_argument("--token-file", help="the admin token (default: the folder's)")
    p.add_argument("--cluster-dir", default=DEFAULT_CLUSTER_DIR)
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    add_tls_args(p)
    p.set_defaults(run=_switch, parser=p)
    r = command(sub, "role", "switch a node's role by hand (clusters without a controller)",
                answer(_role, lambda st, args: print(f"{st.node_id} is now {st.role} in epoch "
                                                     f"{st.epoch}")))
    r.add_argument("--to", required=True, type=BrokerRole.parse,
                   metavar="ASYNC_MASTER|SYNC_MASTER|SLAVE")
    r.add_argument("--master", default="", help="host:port of the master to follow (SLAVE)")
    r.add_argument("--epoch", type=int, default=0,
                   help="a new master's epoch (default: the node's last epoch + 1)")


def _best_member(parser: argparse.ArgumentParser, view, group: str) -> str:
    """The member of the group's sync state set to promote: not the master, heard from
    within the last few seconds, healthy; the highest offset, then the lowest priority."""
    found = next((g for g in view.groups if g.broker_name == group), None)
    if found is None:
        parser.error(f"the controller knows no broker group {group!r} (it knows "
                     f"{', '.join(g.broker_name for g in view.groups) or 'none'})")
    members = [n for n in found.nodes if n.in_sync_state_set and n.node_id != found.master_id
               and n.healthy and 0 <= n.last_heartbeat_age_ms < RECENT_MS]
    if not members:
        parser.error(f"group {group} has no alive, healthy slave in its sync state set "
                     f"({', '.join(found.sync_state_set) or 'none'}) to promote")
    return min(members, key=lambda n: (-n.max_offset, n.priority, n.node_id)).node_id


def _role(client, args):
    if args.to is BrokerRole.SLAVE and not args.master:
        args.parser.error("--to SLAVE needs --master host:port")
    return client.switch_role(args.to.value, args.master, args.epoch)


def _switch(args: argparse.Namespace) -> int:
    address, token, tls = controller_target(args.parser, args.cluster_dir, args.controller,
                                            args.token_file, args)
    if not args.to and not args.group:
        args.parser.error("give --to NODE, or --group NAME")
    node_id, group = args.to or "", args.group
    if node_id and ":" not in node_id:  # a name of the cluster folder
        status = node_status_by_name(args.parser, args.cluster_dir, node_id, args)
        node_id, group = status.node_id, group or status.broker_name
    group = group or node_id.rpartition(":")[0]
    if node_id and node_id.rpartition(":")[0] != group:
        args.parser.error(f"{node_id} is not a node of broker group {group}")
    with ControllerClient(address, token, tls=tls) as client:
        try:
            if not node_id:
                node_id = _best_member(args.parser, client.groups(), group)
            view = client.switch_master(group, node_id)
        except grpc.RpcError as e:
            return refused("switch", e)
    if args.json:
        print_json(view)
        return 0
    print(f"group {view.broker_name}: {view.master_id} is the master in epoch {view.epoch}; the "
          f"nodes follow within a heartbeat (python -m cluster status)")
    return 0

"""`python -m cluster audit`: audit the replicas of a running cluster in one command.

Pulls a copy of every node listed in <cluster-dir>/cluster.json through Admin.ExportStore (the
live stores keep changing; a copy is a consistent snapshot per node) into
<cluster-dir>/audits/<time>/<node>, then runs the Spark audit (`python -m cluster.audit`) on the
copies and writes report.json and lag.png next to them. `--offline` audits the store folders
in place instead (the cluster must be stopped). Exit status: the audit's (0 agree, 1 errors,
2 bad input).

A folder of one group, or `--group NAME`: the replicas of that group (the report of one group).
A folder of several groups (`cluster local --groups N`): every node of every group, and the
controller's route registry (GetGroups' route, fetched before and after the pulls and saved as
route.json beside the copies), audited in ONE Spark application (`--groups`, `--route` of
cluster.audit): findings per group plus the cluster-wide ones (cluster.audit.groups);
lag-<group>.png per group. `--master-url spark://HOST:PORT` after `--` runs it on a
standalone Spark cluster whose executors read the copies at the same path.
"""
from __future__ import annotations

import json
import os
import sys
import time

import grpc

from cluster.admin.admin_token import read_token_file
from cluster.audit.groups import ROUTE_FILE, SavedRoute, route_to_json
from cluster.client.admin_client import AdminClient, ExportError
from cluster.client.controller_client import ControllerClient
from cluster.controller.route_wire import route_from_pb
from cluster.assembly.local_cluster import (ClusterFolderError, cluster_groups, cluster_tls,
                                            nodes_of_group, read_cluster_info)


def _fetch_route(info: dict, token: str) -> tuple[object | None, str]:
    """(the controller's route, "") or (None, why not)."""
    controller = info.get("controller")
    if not controller:
        return None, "the cluster runs without a controller"
    try:
        with ControllerClient(controller["address"], token, timeout=10, tls=cluster_tls(info)) as client:
            return route_from_pb(client.groups().route), ""
    except grpc.RpcError as e:
        return None, f"the controller {controller['address']} did not answer: {e.details()}"


def _pull(info: dict, token: str, nodes: list[dict], out: str) -> list[str] | None:
    dirs = []
    for node in nodes:
        dest = os.path.join(out, node["name"])
        try:
            with AdminClient(node["address"], token, tls=cluster_tls(info)) as client:
                s = client.export_store(dest)
        except (ExportError, grpc.RpcError) as e:
            detail = e.details() if isinstance(e, grpc.RpcError) else str(e)
            print(f"cannot pull {node['name']} ({node['address']}): {detail}; "
                  f"stop the cluster and use --offline", file=sys.stderr)
            return None
        print(f"pulled {node['name']}: {s.bytes / 1048576:.1f} MiB, commitlog "
              f"[{s.commitlog_min_offset}, {s.commitlog_end_offset})", file=sys.stderr)
        dirs.append(dest)
    return dirs


def run_audit(cluster_dir: str, offline: bool, extra: list[str], group: str | None = None) -> int:
    try:
        info = read_cluster_info(cluster_dir)
        groups = cluster_groups(info) if group is None else [group]
        nodes = [n for g in groups for n in nodes_of_group(info, g)]
    except ClusterFolderError as e:
        print(f"{e} (start the cluster with ./scripts/run first)", file=sys.stderr)
        return 2
    several = len(groups) > 1
    names = [n["name"] for n in nodes]
    out = os.path.join(cluster_dir, "audits", time.strftime("%Y%m%d-%H%M%S"))
    options: list[str] = []
    if offline:
        dirs = [os.path.join(cluster_dir, name) for name in names]
        os.makedirs(out, exist_ok=True)
        if several:
            options = ["--no-route-info", "--no-route-reason",
                       "an --offline audit: the cluster is stopped, no route registry to fetch"]
    else:
        token = read_token_file(info["token_file"])
        before = _fetch_route(info, token)[0] if several else None
        pulled = _pull(info, token, nodes, out)
        if pulled is None:
            return 2
        dirs = pulled
        if several:
            route, why = _fetch_route(info, token)
            if route is None:
                options = ["--no-route-reason", why]
            else:
                saved = SavedRoute(route, before.version if before is not None else "",
                                   info["controller"]["address"])
                path = os.path.join(out, ROUTE_FILE)
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(route_to_json(saved), f, indent=2)
                options = ["--route", path]
    if several:
        options += ["--groups", ",".join(n.get("group", groups[0]) for n in nodes)]
    from cluster.audit.audit_main import main as audit_main
    return audit_main([*dirs, "--names", ",".join(names), "--json",
                       os.path.join(out, "report.json"), "--chart", os.path.join(out, "lag.png"),
                       *options, *extra])


def register(sub) -> None:
    audit = sub.add_parser("audit", help="pull every node of a local cluster and run the Spark audit")
    audit.add_argument("--cluster-dir", default="data/cluster")
    audit.add_argument("--offline", action="store_true",
                       help="audit the store folders in place (the cluster must be stopped)")
    audit.add_argument("--group", default=None,
                       help="audit this broker group only (default: every group of the folder, "
                            "in one Spark job, with the cluster-wide checks)")
    audit.add_argument("audit_args", nargs="*",
                       help="extra `python -m cluster.audit` options after --, e.g. "
                            "-- --master-url spark://HOST:PORT")
    audit.set_defaults(run=lambda args: run_audit(args.cluster_dir, args.offline, args.audit_args,
                                                  args.group),
                       parser=audit)

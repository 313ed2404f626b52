"""`python -m cluster audit`: audit the replicas of a running group in one command.

Pulls a copy of every node of one broker group listed in <cluster-dir>/cluster.json (`--group`,
default the folder's first group: the audit compares the replicas of one group) through
Admin.ExportStore
(the live stores keep changing; a copy is a consistent snapshot per node) into
<cluster-dir>/audits/<time>/<node>, then runs the Spark audit (`python -m cluster.audit`) on the
copies and writes report.json and lag.png next to them. `--offline` audits the store folders
in place instead (the cluster must be stopped). Exit status: the audit's (0 agree, 1 errors,
2 bad input)."""
from __future__ import annotations

import os
import sys
import time

import grpc

from cluster.admin.admin_token import read_token_file
from cluster.client.admin_client import AdminClient, ExportError
from cluster.assembly.local_cluster import (ClusterFolderError, cluster_tls, nodes_of_group,
                                            read_cluster_info)


def run_audit(cluster_dir: str, offline: bool, extra: list[str], group: str | None = None) -> int:
    try:
        info = read_cluster_info(cluster_dir)
        nodes = nodes_of_group(info, group)
    except ClusterFolderError as e:
        print(f"{e} (start the cluster with ./scripts/run first)", file=sys.stderr)
        return 2
    names = [n["name"] for n in nodes]
    out = os.path.join(cluster_dir, "audits", time.strftime("%Y%m%d-%H%M%S"))
    if offline:
        dirs = [os.path.join(cluster_dir, name) for name in names]
        os.makedirs(out, exist_ok=True)
    else:
        token = read_token_file(info["token_file"])
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
                return 2
            print(f"pulled {node['name']}: {s.bytes / 1048576:.1f} MiB, commitlog "
                  f"[{s.commitlog_min_offset}, {s.commitlog_end_offset})", file=sys.stderr)
            dirs.append(dest)
    from cluster.audit.audit_main import main as audit_main
    return audit_main([*dirs, "--names", ",".join(names), "--json",
                       os.path.join(out, "report.json"), "--chart", os.path.join(out, "lag.png"),
                       *extra])


def register(sub) -> None:
    audit = sub.add_parser("audit", help="pull every node of a local cluster and run the Spark audit")
    audit.add_argument("--cluster-dir", default="data/cluster")
    audit.add_argument("--offline", action="store_true",
                       help="audit the store folders in place (the cluster must be stopped)")
    audit.add_argument("--group", default=None,
                       help="the broker group to audit (default: the folder's first)")
    audit.add_argument("audit_args", nargs="*", help="extra `python -m cluster.audit` options after --")
    audit.set_defaults(run=lambda args: run_audit(args.cluster_dir, args.offline, args.audit_args,
                                                  args.group),
                       parser=audit)

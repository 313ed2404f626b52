"""Command line of the cluster: `python -m cluster {node,local,status,pull,send,get,query,audit} ...`."""
from __future__ import annotations

import argparse
import logging
import sys

from .cli_targets import add_target_args, resolve_target
from .smoke_cli import SMOKE_COMMANDS, add_smoke_commands, run_smoke


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster")
    sub = parser.add_subparsers(dest="command", required=True)
    node = sub.add_parser("node", help="run one node")
    node.add_argument("--config", help="broker.conf-style file")
    node.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config key (repeatable)")
    local = sub.add_parser("local", help="run a master and two slaves on 127.0.0.1")
    local.add_argument("--dir", default="data/cluster")
    local.add_argument("--base-port", type=int, default=10911)
    local.add_argument("--role", default="SYNC_MASTER", choices=("SYNC_MASTER", "ASYNC_MASTER"))
    status = sub.add_parser("status", help="print the nodes and the replication table")
    status.add_argument("--cluster-dir", default="data/cluster")
    status.add_argument("--address", action="append", default=[])
    status.add_argument("--token-file")
    status.add_argument("--json", action="store_true")
    pull = sub.add_parser("pull", help="copy a running node's store directory (Admin.ExportStore)")
    add_target_args(pull, None)
    pull.add_argument("--out", required=True, help="destination: must not exist or be empty")
    pull.add_argument("--include", default="",
                      help="comma-separated parts: commitlog,consumequeue,index,config,"
                           "checkpoint,epochFileCheckpoint (default: all)")
    pull.add_argument("--chunk-bytes", type=int, default=1 << 20)
    add_smoke_commands(sub)
    audit = sub.add_parser("audit", help="pull every node of a local cluster and run the Spark audit")
    audit.add_argument("--cluster-dir", default="data/cluster")
    audit.add_argument("--offline", action="store_true",
                       help="audit the store folders in place (the cluster must be stopped)")
    audit.add_argument("audit_args", nargs="*", help="extra `python -m cluster.audit` options after --")
    args = parser.parse_args(argv)
    if args.command == "pull":
        from .pull_cli import run_pull
        return run_pull(*resolve_target(parser, args), args)
    if args.command == "audit":
        from .audit_cli import run_audit
        return run_audit(args.cluster_dir, args.offline, args.audit_args)
    if args.command in SMOKE_COMMANDS:
        return run_smoke(args.command, *resolve_target(parser, args), args)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "node":
        from .node_main import run_node
        return run_node(args.config, args.set)
    if args.command == "local":
        from .local_cluster import run_local
        return run_local(args.dir, args.base_port, args.role)
    from .status_cli import cluster_targets, print_status
    addresses, token = cluster_targets(args.cluster_dir, args.address, args.token_file)
    return print_status(addresses, token, args.json)


if __name__ == "__main__":
    sys.exit(main())

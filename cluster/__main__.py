"""Command line of the cluster: `python -m cluster {node,local,status,pull} ...`."""
from __future__ import annotations

import argparse
import logging
import sys


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
    pull.add_argument("--address", help="host:port of the node")
    pull.add_argument("--token-file", help="the admin token (default with --cluster-dir: its token)")
    pull.add_argument("--cluster-dir", help="a `python -m cluster local` folder (with --node)")
    pull.add_argument("--node", help="node name in <cluster-dir>/cluster.json, e.g. master")
    pull.add_argument("--out", required=True, help="destination: must not exist or be empty")
    pull.add_argument("--include", default="",
                      help="comma-separated parts: commitlog,consumequeue,index,config,"
                           "checkpoint,epochFileCheckpoint (default: all)")
    pull.add_argument("--chunk-bytes", type=int, default=1 << 20)
    args = parser.parse_args(argv)
    if args.command == "pull":
        return _pull(parser, args)
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


def _pull(parser: argparse.ArgumentParser, args) -> int:
    """`pull`: progress (percent, MB/s) on stderr, a one-line summary on stdout."""
    import json
    import os
    import time

    import grpc

    from .admin_client import AdminClient, ExportError
    from .auth import read_token_file
    from store.errors import ConfigError

    address, token_file = args.address, args.token_file
    if args.cluster_dir:
        if not args.node:
            parser.error("--cluster-dir needs --node NAME")
        try:
            with open(os.path.join(args.cluster_dir, "cluster.json"), encoding="utf-8") as f:
                info = json.load(f)
        except (OSError, ValueError) as e:
            parser.error(f"cannot read {args.cluster_dir}/cluster.json: {e}")
        nodes = {n["name"]: n["address"] for n in info.get("nodes", [])}
        if args.node not in nodes:
            parser.error(f"no node {args.node!r} in {args.cluster_dir}/cluster.json "
                         f"(nodes: {', '.join(nodes)})")
        address = address or nodes[args.node]
        token_file = token_file or info.get("token_file")
    if not address:
        parser.error("give --address or --cluster-dir with --node")
    if not token_file:
        parser.error("give --token-file (the node logs where its token is)")
    try:
        token = read_token_file(token_file)
    except ConfigError as e:
        parser.error(str(e))
    include = [p for p in args.include.split(",") if p.strip()]
    last = [0.0]

    def progress(p) -> None:
        now = time.monotonic()
        if now - last[0] < 0.5 and p.bytes_done < p.bytes_total:
            return
        last[0] = now
        pct = 100.0 * p.bytes_done / p.bytes_total if p.bytes_total else 100.0
        rate = p.bytes_done / 1e6 / p.seconds if p.seconds > 0 else 0.0
        sys.stderr.write(f"\rpull: {pct:5.1f}%  {p.bytes_done / 1048576:.1f}/"
                         f"{p.bytes_total / 1048576:.1f} MiB  {rate:.1f} MB/s  "
                         f"files {p.files_done}/{p.files_total}   ")
        sys.stderr.flush()

    with AdminClient(address, token) as client:
        try:
            s = client.export_store(args.out, include=include, chunk_bytes=args.chunk_bytes,
                                    progress=progress)
        except ExportError as e:
            sys.stderr.write(f"\npull failed: {e}\n")
            return 1
        except grpc.RpcError as e:
            sys.stderr.write(f"\npull failed: {e.code().name}: {e.details()}\n")
            return 1
    sys.stderr.write("\n")
    rate = s.bytes / 1e6 / s.seconds if s.seconds > 0 else 0.0
    print(f"pulled {s.files} files, {s.bytes} bytes in {s.seconds:.1f} s ({rate:.1f} MB/s) from "
          f"{s.node_id or address} into {args.out}; commitlog [{s.commitlog_min_offset}, "
          f"{s.commitlog_end_offset})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

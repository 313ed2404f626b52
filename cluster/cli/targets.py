"""Which node a command talks to, and with which token: `--address` + `--token-file`, or a
`python -m cluster local` folder (`--cluster-dir`, whose cluster.json lists the nodes and the
token file) with `--node NAME`."""
from __future__ import annotations

import argparse
import getpass
import json
import os

from store.errors import ConfigError

from cluster.client.admin_client import AdminClient
from cluster.admin.admin_token import read_token_file

DEFAULT_CLUSTER_DIR = "data/cluster"


def add_target_args(p: argparse.ArgumentParser, default_node: str | None) -> None:
    p.add_argument("--address", help="host:port of the node")
    p.add_argument("--token-file", help="the admin token (default with --cluster-dir: its token)")
    p.add_argument("--cluster-dir", default=DEFAULT_CLUSTER_DIR,
                   help=f"a `python -m cluster local` folder (default {DEFAULT_CLUSTER_DIR})")
    p.add_argument("--node", default=default_node,
                   help=f"node name in <cluster-dir>/cluster.json (default {default_node})")


def node_address(parser: argparse.ArgumentParser, cluster_dir: str, node: str) -> str:
    """The address of a node of a `python -m cluster local` folder (parser error if unknown)."""
    path = os.path.join(cluster_dir, "cluster.json")
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError) as e:
        parser.error(f"give --address, or a cluster folder: cannot read {path}: {e}")
    nodes = {n["name"]: n["address"] for n in info.get("nodes", [])}
    if node not in nodes:
        parser.error(f"no node {node!r} in {path} (nodes: {', '.join(nodes)})")
    return nodes[node]


def resolve_target(parser: argparse.ArgumentParser, args) -> tuple[str, str]:
    """(address, token) or a parser error naming what is missing."""
    address, token_file = args.address, args.token_file
    if not address or not token_file:
        path = os.path.join(args.cluster_dir, "cluster.json")
        try:
            with open(path, encoding="utf-8") as f:
                info = json.load(f)
        except (OSError, ValueError) as e:
            parser.error(f"give --address and --token-file, or a cluster folder: cannot read {path}: {e}")
        nodes = {n["name"]: n["address"] for n in info.get("nodes", [])}
        if not address:
            if not args.node:
                parser.error("--cluster-dir needs --node NAME")
            if args.node not in nodes:
                parser.error(f"no node {args.node!r} in {path} (nodes: {', '.join(nodes)})")
            address = nodes[args.node]
        token_file = token_file or info.get("token_file")
    if not token_file:
        parser.error("give --token-file (the node logs where its token is)")
    try:
        return address, read_token_file(token_file)
    except ConfigError as e:
        parser.error(str(e))
        raise  # unreachable: parser.error exits


def operator() -> str:
    """The local user, sent as `x-operator` so the node's log says who changed what."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def connect(args, timeout: float = 30.0) -> AdminClient:
    """An AdminClient for the node the arguments name (parser errors exit with status 2)."""
    address, token = resolve_target(args.parser, args)
    return AdminClient(address, token, timeout=timeout, operator=operator())


def cluster_targets(cluster_dir: str | None, addresses: list[str],
                    token_file: str | None) -> tuple[list[str], str]:
    """Every node of a cluster folder (or the --address list) and the token (`status`)."""
    if cluster_dir and not addresses:
        path = os.path.join(cluster_dir, "cluster.json")
        try:
            with open(path, encoding="utf-8") as f:
                info = json.load(f)
        except (OSError, ValueError) as e:
            raise SystemExit(f"cannot read {path}: {e} (start a cluster with ./scripts/run, or "
                             f"give --address and --token-file)")
        addresses = [n["address"] for n in info["nodes"]]
        token_file = token_file or info["token_file"]
    if not addresses:
        raise SystemExit("give --cluster-dir or --address")
    if not token_file:
        raise SystemExit("give --token-file (the node logs where its token is)")
    try:
        return addresses, read_token_file(token_file)
    except ConfigError as e:
        raise SystemExit(str(e))

"""Which node a command talks to, and with which token: `--address` + `--token-file`, or a
`python -m cluster local` folder (`--cluster-dir`, whose cluster.json lists the nodes and the
token file) with `--node NAME`. `--node @master` (the default of commands that change
something) is whichever node of the folder's first broker group is the master now: after a
failover that is not the node named "master"; `--node @master:broker-b` is broker-b's.

TLS: nodes serving TLS need the CA that issued their certificates: `--tls-ca FILE` (and
`--tls-cert`/`--tls-key` for nodes that need client certificates), or, for the nodes of a
cluster folder, the folder's (`tls` in cluster.json, written by `cluster local --tls`)."""
from __future__ import annotations

import argparse
import getpass
import os

import grpc

from common.config_values import ConfigError

from cluster.admin.admin_token import read_token_file
from cluster.client.admin_client import AdminClient
from cluster.assembly.local_cluster import (
    CLUSTER_INFO_FILE,
    ClusterFolderError,
    cluster_tls,
    nodes_of_group,
    read_cluster_info,
)
# add_tls_args: the commands import it from here too
from cluster.cli.tls_args import add_tls_args, args_tls  # noqa: F401
from cluster.security.tls import ClientTls

DEFAULT_CLUSTER_DIR = "data/cluster"
CURRENT_MASTER = "@master"


def client_tls(args, info: dict | None = None) -> ClientTls | None:
    """--tls-ca (with --tls-cert/--tls-key), else the TLS of the cluster folder whose
    cluster.json is `info` (only when the nodes called are the folder's), else plaintext."""
    given = args_tls(args)
    if given is not None or info is None:
        return given
    try:
        return cluster_tls(info)
    except ConfigError as e:
        raise SystemExit(f"TLS: {e}")


def add_target_args(p: argparse.ArgumentParser, default_node: str | None) -> None:
    p.add_argument("--address", help="host:port of the node")
    p.add_argument("--token-file", help="the admin token (default with --cluster-dir: its token)")
    p.add_argument("--cluster-dir", default=DEFAULT_CLUSTER_DIR,
                   help=f"a `python -m cluster local` folder (default {DEFAULT_CLUSTER_DIR})")
    p.add_argument("--node", default=default_node,
                   help=f"node name in <cluster-dir>/cluster.json, or {CURRENT_MASTER} for the "
                        f"current master of the first broker group ({CURRENT_MASTER}:GROUP: of "
                        f"that group; default {default_node})")
    add_tls_args(p)


def _node_address(parser: argparse.ArgumentParser, info: dict, cluster_dir: str,
                  node: str, tls: ClientTls | None = None) -> str:
    nodes = {n["name"]: n["address"] for n in info.get("nodes", [])}
    if node == CURRENT_MASTER or node.startswith(CURRENT_MASTER + ":"):
        group = node.partition(":")[2] or None
        try:
            members = {n["name"]: n["address"] for n in nodes_of_group(info, group)}
        except ClusterFolderError as e:
            parser.error(str(e))
        return _current_master(parser, info, members, tls)
    if node not in nodes:
        parser.error(f"no node {node!r} in {os.path.join(cluster_dir, CLUSTER_INFO_FILE)} "
                     f"(nodes: {', '.join(nodes)})")
    return nodes[node]


def _current_master(parser: argparse.ArgumentParser, info: dict, nodes: dict[str, str],
                    tls: ClientTls | None) -> str:
    """The address of the node that reports a master role in the highest epoch."""
    token = read_token_file(info["token_file"])
    best: tuple[int, str] | None = None
    for address in nodes.values():
        with AdminClient(address, token, timeout=3, tls=tls) as client:
            try:
                s = client.status()
            except grpc.RpcError:
                continue  # down: not the master anyone can use
        if s.role in ("ASYNC_MASTER", "SYNC_MASTER") and (best is None or s.epoch > best[0]):
            best = (s.epoch, address)
    if best is None:
        parser.error(f"no node of the cluster folder is the master now (nodes: "
                     f"{', '.join(nodes)}); see `python -m cluster status`")
    return best[1]


def node_target(args) -> tuple[str, ClientTls | None]:
    """(address, TLS) of --address, or of node --node of the cluster folder (parser error if
    unknown)."""
    if args.address:
        return args.address, client_tls(args)
    try:
        info = read_cluster_info(args.cluster_dir)
    except ClusterFolderError as e:
        args.parser.error(f"give --address, or a cluster folder: {e}")
    tls = client_tls(args, info)
    return _node_address(args.parser, info, args.cluster_dir, args.node, tls), tls


def resolve_target(parser: argparse.ArgumentParser, args) -> tuple[str, str, ClientTls | None]:
    """(address, token, TLS) or a parser error naming what is missing."""
    address, token_file = args.address, args.token_file
    tls = client_tls(args)
    if not address or not token_file:
        try:
            info = read_cluster_info(args.cluster_dir)
        except ClusterFolderError as e:
            parser.error(f"give --address and --token-file, or a cluster folder: {e}")
        if not address:
            if not args.node:
                parser.error("--cluster-dir needs --node NAME")
            tls = client_tls(args, info)
            address = _node_address(parser, info, args.cluster_dir, args.node, tls)
        token_file = token_file or info.get("token_file")
    if not token_file:
        parser.error("give --token-file (the node logs where its token is)")
    try:
        return address, read_token_file(token_file), tls
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
    address, token, tls = resolve_target(args.parser, args)
    return AdminClient(address, token, timeout=timeout, operator=operator(), tls=tls)


def cluster_targets(cluster_dir: str | None, addresses: list[str],
                    token_file: str | None, args=None) -> tuple[list[str], str,
                                                             ClientTls | None]:
    """Every node of a cluster folder (or the --address list), the token and the TLS
    (`status`; `args`: its --tls-* options)."""
    tls = client_tls(args)
    if cluster_dir and not addresses:
        try:
            info = read_cluster_info(cluster_dir)
        except ClusterFolderError as e:
            raise SystemExit(f"{e} (start a cluster with ./scripts/run, or give --address and "
                             f"--token-file)")
        addresses = [n["address"] for n in info["nodes"]]
        token_file = token_file or info["token_file"]
        tls = client_tls(args, info)
    if not addresses:
        raise SystemExit("give --cluster-dir or --address")
    if not token_file:
        raise SystemExit("give --token-file (the node logs where its token is)")
    try:
        return addresses, read_token_file(token_file), tls
    except ConfigError as e:
        raise SystemExit(str(e))


def controller_target(parser: argparse.ArgumentParser, cluster_dir: str, address: str | None,
                      token_file: str | None, args=None) -> tuple[str, str, ClientTls | None]:
    """(controller address, token, TLS): the arguments, or the cluster folder's controller."""
    tls = client_tls(args)
    if not address or not token_file:
        try:
            info = read_cluster_info(cluster_dir)
        except ClusterFolderError as e:
            parser.error(f"give --controller and --token-file, or a cluster folder: {e}")
        if not address:
            if "controller" not in info:
                parser.error(f"the cluster in {cluster_dir} runs without a controller (use "
                             f"`python -m cluster role` there)")
            address = info["controller"]["address"]
            tls = client_tls(args, info)
        token_file = token_file or info.get("token_file")
    try:
        return address, read_token_file(token_file), tls
    except ConfigError as e:
        parser.error(str(e))
        raise  # unreachable: parser.error exits


def node_status_by_name(parser: argparse.ArgumentParser, cluster_dir: str, name: str,
                        args=None):
    """The status of the node called `name` in the cluster folder (parser error if it cannot
    be read)."""
    try:
        info = read_cluster_info(cluster_dir)
    except ClusterFolderError as e:
        parser.error(f"give a node id (broker-a:1), or a cluster folder: {e}")
    tls = client_tls(args, info)
    address = _node_address(parser, info, cluster_dir, name, tls)
    with AdminClient(address, read_token_file(info["token_file"]), timeout=5,
                     tls=tls) as client:
        try:
            return client.status()
        except grpc.RpcError as e:
            parser.error(f"cannot ask {name} ({address}) for its node id: {e.details()}")

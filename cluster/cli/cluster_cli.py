"""The parser of `python -m cluster` and the dispatch to each command's `run`.

Commands talking to a running node take `--cluster-dir D --node NAME` (a `python -m cluster
local` folder, default data/cluster) or `--address host:port --token-file F`."""
from __future__ import annotations

import argparse
import logging
import os
import sys

from store.broker_role import BrokerRole

from cluster.cli import (audit_cmd, config_cmd, consume_cmd, group_cmd, message_cmd, pull_cmd,
                         smoke_cmd, status_cmd, store_ops_cmd, switch_cmd, topic_cmd)

# Each module adds its commands with register(sub).
COMMAND_MODULES = (status_cmd, switch_cmd, topic_cmd, group_cmd, message_cmd, store_ops_cmd,
                   config_cmd, smoke_cmd, consume_cmd, pull_cmd, audit_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cluster",
        description="Run nodes and operate them (an mqadmin for this store). Read commands "
                    "print tables; add --json for scripts.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    node = sub.add_parser("node", help="run one node")
    node.add_argument("--config", help="broker.conf-style file")
    node.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config key (repeatable)")
    node.set_defaults(run=_run_node)
    ctrl = sub.add_parser("controller", help="run a controller (automatic failover)")
    ctrl.add_argument("--config", help="properties file (see cluster/controller/controller_config)")
    ctrl.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config key (repeatable)")
    ctrl.set_defaults(run=_run_controller)
    local = sub.add_parser("local", help="run a controller, a master and two slaves on 127.0.0.1")
    local.add_argument("--dir", default="data/cluster")
    local.add_argument("--base-port", type=int, default=10911)
    local.add_argument("--role", default=BrokerRole.SYNC_MASTER.value,
                       choices=[r.value for r in BrokerRole if r.is_master])
    local.add_argument("--no-controller", action="store_true",
                       help="fixed roles from brokerRole, no automatic failover")
    local.set_defaults(run=_run_local)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def _log_to_stderr() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _run_node(args) -> int:
    _log_to_stderr()
    from cluster.node.node_main import run_node
    return run_node(args.config, args.set)


def _run_local(args) -> int:
    _log_to_stderr()
    from cluster.node.local_cluster import run_local
    return run_local(args.dir, args.base_port, args.role, controller=not args.no_controller)


def _run_controller(args) -> int:
    _log_to_stderr()
    from cluster.controller.controller_main import run_controller
    return run_controller(args.config, args.set)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:  # `... | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

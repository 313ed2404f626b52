"""The commands that run processes: `node`, `controller`, `archive` and `local`.

    python -m cluster node --config broker.conf [--set key=value ...]
    python -m cluster controller --config controller.conf [--set key=value ...]
    python -m cluster archive --config archive.conf [--set key=value ...]
    python -m cluster local [--dir D] [--base-port P] [--role R] [--no-controller] [--tls]
                            [--acl PLAIN_ACL_YML] [--archive] [--groups N]

`node`, `controller` and `archive` run until SIGTERM or Ctrl-C, then stop cleanly, and print one JSON line
when they serve, for the scripts and tests that start them:
    {"event": "ready", "address": ..., "pid": ..., "admin_token": <where>, ...}
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from typing import Callable

from common import failpoints
from store.broker_role import BrokerRole
from store.config import parse_properties
from common.config_values import ConfigError, arg_int
from store.errors import StoreError

from cluster.assembly.local_layout import MAX_GROUPS
from cluster.cli.log_setup import ProcessContext, add_log_format_arg, setup_logging

log = logging.getLogger(__name__)


def register(sub) -> None:
    for name, help_text, run in (("node", "run one node", _run_node),
                                 ("controller", "run a controller (automatic failover)",
                                  _run_controller),
                                 ("archive", "run a commitlog archive server (docs: The archive)",
                                  _run_archive)):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--config", help="properties file (broker.conf / controller.conf keys)")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config key (repeatable)")
        add_log_format_arg(p)
        p.set_defaults(run=run)
    local = sub.add_parser("local", help="run a controller, a master and two slaves on 127.0.0.1")
    local.add_argument("--dir", default="data/cluster")
    local.add_argument("--base-port", type=int, default=10911)
    local.add_argument("--role", default=BrokerRole.SYNC_MASTER.value,
                       choices=[r.value for r in BrokerRole if r.is_master])
    local.add_argument("--no-controller", action="store_true",
                       help="fixed roles from brokerRole, no automatic failover")
    local.add_argument("--tls", action="store_true",
                       help="TLS on every port, with a throwaway CA and certificates made in "
                            "<dir>/tls (reused on later starts)")
    local.add_argument("--acl", default="", metavar="PLAIN_ACL_YML",
                       help="ACL on: every client call is signed by a user of this RocketMQ "
                            "plain_acl.yml and holds its PUB/SUB permissions (docs: Security)")
    local.add_argument("--groups", type=arg_int(1, MAX_GROUPS), default=1, metavar="N",
                       help=f"N broker groups (1..{MAX_GROUPS}) of a master and two slaves, "
                            f"broker-a, broker-b, ..., under the one controller (default 1). "
                            f"Group k's nodes b-master, b-slave1, b-slave2 (c-..., ...) listen "
                            f"on base+100k, +10, +20; group a keeps master, slave1, slave2 on "
                            f"base, +10, +20; the controller stays on base+30")
    local.add_argument("--archive", action="store_true",
                       help="also run a commitlog archive, with a short retention demo: each "
                            "sealed 8 MiB commitlog file is archived, then deleted (docs: "
                            "The archive)")
    local.set_defaults(run=_run_local)


def load_properties(config_path: str | None, overrides: list[str]) -> dict[str, str]:
    """The properties of an optional file, then `key=value` overrides (ConfigError if bad)."""
    props: dict[str, str] = {}
    if config_path:
        try:
            with open(config_path, encoding="utf-8") as f:
                props.update(parse_properties(f.read()))
        except OSError as e:
            raise ConfigError(f"cannot read {config_path}: {e}") from e
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: want key=value")
        props[key.strip()] = value.strip()
    return props


def serve_until_signal(what: str,
                       start: Callable[[ProcessContext], tuple[dict, Callable[[], None]]],
                       log_format: str | None = None) -> int:
    """start(log context) -> (the ready line's fields, stop); print the line, wait for
    SIGTERM/SIGINT, stop. Exit status 1 when it cannot start. `start` sets the context's
    `describe` as soon as its process exists, so every log line names it."""
    context = setup_logging(what, log_format)
    try:
        ready, stop = start(context)
    except StoreError as e:
        print(f"cannot start the {what}: {e}", file=sys.stderr)
        return 1
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    print(json.dumps({"event": "ready", "pid": os.getpid(), **ready}), flush=True)
    while not stopping.wait(1.0):
        pass
    log.info("signal received: stopping the %s", what)
    stop()
    return 0


def _run_node(args) -> int:
    from cluster.assembly.heap_tuning import keep_large_buffers
    from cluster.assembly.node import Node
    from cluster.config.node_config import node_config_from_properties

    keep_large_buffers()  # before the node allocates: see cluster/assembly/heap_tuning.py

    def start(context):
        failpoints.configure()  # a bad RMQSTORE_FAILPOINTS fails the start, not the first hit
        node = Node(node_config_from_properties(load_properties(args.config, args.set)))
        context.describe = lambda: (node.config.node_id, node.epochs.last_epoch,
                                    node.role.name)
        node.start()
        return ({"node_id": node.config.node_id, "address": node.address,
                 "role": node.role.name, "admin_token": node.token_source,
                 "metrics": node.metrics.address if node.metrics else ""}, node.stop)
    return serve_until_signal("node", start, args.log_format)


def _run_controller(args) -> int:
    from cluster.controller.controller_config import controller_config_from_properties
    from cluster.assembly.controller_process import ControllerProcess

    def start(context):
        process = ControllerProcess(controller_config_from_properties(
            load_properties(args.config, args.set)))
        context.describe = lambda: ("controller", 0, "CONTROLLER")
        process.start()
        return ({"address": process.address, "admin_token": process.config.token_path,
                 "metrics": process.metrics.address if process.metrics else ""}, process.stop)
    return serve_until_signal("controller", start, args.log_format)


def _run_archive(args) -> int:
    from cluster.archive.archive_config import archive_config_from_properties
    from cluster.assembly.archive_process import ArchiveProcess

    def start(context):
        process = ArchiveProcess(archive_config_from_properties(
            load_properties(args.config, args.set)))
        context.describe = lambda: (f"archive-{process.archive.archive_id}", 0, "ARCHIVE")
        process.start()
        return ({"address": process.address, "http": process.http_address,
                 "archive_id": process.archive.archive_id,
                 "admin_token": process.config.token_path,
                 "metrics": process.metrics.address if process.metrics else ""}, process.stop)
    return serve_until_signal("archive", start, args.log_format)


def _run_local(args) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from cluster.assembly.local_cluster import run_local
    try:
        return run_local(args.dir, args.base_port, args.role,
                         controller=not args.no_controller, tls=args.tls, acl_file=args.acl,
                         archive=args.archive, groups=args.groups)
    except ConfigError as e:  # a bad --acl file, --groups without a controller: nothing ran
        print(f"cluster local: {e}", file=sys.stderr)
        return 2

"""The parser of `python -m cluster` and the dispatch to each command's `run`.

Commands talking to a running node take `--cluster-dir D --node NAME` (a `python -m cluster
local` folder, default data/cluster) or `--address host:port --token-file F`."""
from __future__ import annotations

import argparse
import os
import sys

from cluster.cli import (audit_cmd, certs_cmd, config_cmd, consume_cmd, drill_cmd, group_cmd,
                         health_cmd, history_cmd, message_cmd, pull_cmd, serve_cmd, smoke_cmd, status_cmd,
                         store_ops_cmd, switch_cmd, topic_cmd)

# Each module adds its commands with register(sub).
COMMAND_MODULES = (serve_cmd, status_cmd, switch_cmd, topic_cmd, group_cmd, message_cmd,
                   store_ops_cmd, config_cmd, smoke_cmd, consume_cmd, pull_cmd, audit_cmd,
                   drill_cmd, health_cmd, certs_cmd, history_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cluster",
        description="Run nodes and operate them (an mqadmin for this store). Read commands "
                    "print tables; add --json for scripts.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:  # `... | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

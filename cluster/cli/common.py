"""Building blocks of the command modules: a subcommand with the target options, and running
one Admin call with refusals turned into exit status 1."""
from __future__ import annotations

import argparse
from typing import Callable

import grpc

from cluster.client.admin_client import AdminClient
from cluster.cli.output import refused
from cluster.cli.targets import add_target_args, connect

Run = Callable[[AdminClient, argparse.Namespace], int]


def command(sub, name: str, help: str, run: Run, *, node: str | None = "master",
            json_flag: bool = True, prefix: str = "") -> argparse.ArgumentParser:
    """A subcommand talking to one node (`--node`, default `node`) through `run(client, args)`;
    `prefix` is the parent command's name (`topic` for `topic create`), for error messages."""
    p = sub.add_parser(name, help=help, description=help)
    add_target_args(p, node)
    if json_flag:
        p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(run=_runner(run), parser=p, what=f"{prefix} {name}".strip())
    return p


def _runner(run: Run) -> Callable[[argparse.Namespace], int]:
    def go(args: argparse.Namespace) -> int:
        with connect(args) as client:
            try:
                return run(client, args)
            except grpc.RpcError as e:
                return refused(args.what, e)
    return go


def group(sub, name: str, help: str):
    """A command with its own subcommands (`topic list`, `topic create`, ...)."""
    p = sub.add_parser(name, help=help, description=help)
    inner = p.add_subparsers(dest=f"{name}_command", required=True, metavar="ACTION")
    return inner

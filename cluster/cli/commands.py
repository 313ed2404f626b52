"""Building blocks of the command modules: a subcommand with the target options, running one
Admin call with refusals turned into exit status 1, and answers printed as JSON (--json) or for
people."""
from __future__ import annotations

import argparse
from typing import Any, Callable

import grpc

from cluster.client.admin_client import AdminClient
from cluster.cli.output import print_json, refused
from cluster.cli.targets import CURRENT_MASTER, add_target_args, connect

Run = Callable[[AdminClient, argparse.Namespace], int]
Call = Callable[[AdminClient, argparse.Namespace], Any]  # the answer: a message, dict or list
Show = Callable[[Any, argparse.Namespace], "int | None"]  # prints it for people; exit status


def answer(call: Call, show: Show) -> Run:
    """A Run that makes the call, then prints its answer as JSON with --json or with `show`."""
    def run(client: AdminClient, args: argparse.Namespace) -> int:
        r = call(client, args)
        if args.json:
            print_json(r)
            return 0
        return show(r, args) or 0
    return run


def command(sub, name: str, help: str, run: Run, *, node: str | None = CURRENT_MASTER,
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



"""The parser of `python -m store` (console script `rmq-store`) and the dispatch to each
command's function.

Read-only commands (never take the `lock`, never recover, never write a byte; they work on a
running store and on copies), through store.readonly:

    inspect DIR [--json]                     files, offsets, consume queues, index, checkpoint
    dump DIR [--topic T] [--queue N] [--from OFFSET] [--limit N] [--json] [--body]
    verify DIR [--json] [--progress] [--index-sample N]
                                             CRC of every record, consume queue and index
                                             consistency; exit 0 clean, 1 damage, 2 usage

Commands that open the store (MessageStore load/start, clean shutdown):

    put DIR --topic T [--queue N] [--tag X] [--keys "a b"] [--body TEXT | --body-file F] [--count N]
    get DIR --topic T --queue N [--offset O] [--count N] [--tag-filter "a||b"]
    demo DIR --messages N [--file-size BYTES]

Each command lives in its own module, which adds its subcommand with register(sub).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from store.readonly import NotAStoreDirectory
from store.cli import demo_cmd as demo
from store.cli import dump_cmd as dump
from store.cli import get_cmd as get
from store.cli import inspect_cmd as inspect
from store.cli import put_cmd as put
from store.cli import verify_cmd as verify
from store.cli.tool_common import EXIT_DAMAGE, EXIT_USAGE, UsageError, err

COMMAND_MODULES = (inspect, dump, verify, put, get, demo)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m store",
        description="Inspect, dump, verify and exercise a RocketMQ-layout message store.")
    p.add_argument("-v", "--verbose", action="store_true", help="log store activity (INFO)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (UsageError, NotAStoreDirectory) as e:
        err(f"{parser.prog} {args.command}: error: {e}")
        return EXIT_USAGE
    except BrokenPipeError:  # `... | head`: the reader went away
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return EXIT_DAMAGE
    except KeyboardInterrupt:
        err("interrupted")
        return 130

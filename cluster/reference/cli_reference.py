"""The command reference: every command of `python -m cluster`, `python -m cluster.audit` and
`python -m store`, read from their argparse parsers (usage, description, each option with its
default and help), so the page lists exactly what the commands accept."""
from __future__ import annotations

import argparse
import contextlib
import os
from typing import Iterator

from store.cli.store_cli import build_parser as store_parser

from cluster.audit.audit_main import build_parser as audit_parser
from cluster.cli.cluster_cli import build_parser as cluster_parser
from cluster.reference.markdown import cell, code, prose, table

WIDTH = "100"  # argparse wraps usage lines at the terminal's width: the same on every build


@contextlib.contextmanager
def _fixed_width() -> Iterator[None]:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def commands(parser: argparse.ArgumentParser, name: str,
             summary: str = "") -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """(full name, parser, one-line help) of `parser` and of every subcommand below it."""
    yield name, parser, summary
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for sub_name, sub in action.choices.items():
                yield from commands(sub, f"{name} {sub_name}", helps.get(sub_name, ""))


def _default(action: argparse.Action) -> str:
    d = action.default
    if d is None or d is argparse.SUPPRESS or isinstance(action, (
            argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._CountAction,
            argparse._HelpAction)) or d == []:
        return ""
    if isinstance(d, bool):
        return str(d).lower()
    return code(d)


def options(parser: argparse.ArgumentParser) -> list[list[str]]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help is argparse.SUPPRESS:
            continue
        if action.option_strings:
            metavar = formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
            name = ", ".join(action.option_strings) + (f" {metavar}" if metavar else "")
        else:
            name = formatter._metavar_formatter(action, action.dest)(1)[0]
        help_text = formatter._expand_help(action) if action.help else ""
        if action.choices and not isinstance(action.choices, dict) and "{" not in name:
            help_text += f" (one of {', '.join(map(str, action.choices))})"
        rows.append([code(name), _default(action), cell(help_text)])
    return rows


def section(name: str, parser: argparse.ArgumentParser, summary: str) -> list[str]:
    out = [f"### `{name}`", ""]
    text = parser.description or summary
    if text:
        out += [prose(text.strip()), ""]
    out += ["```text", parser.format_usage().strip(), "```", ""]
    rows = options(parser)
    if rows:
        out += [table(["option", "default", "what it does"], rows), ""]
    return out


def render() -> str:
    parts: list[str] = []
    with _fixed_width():
        for title, parser in (("python -m cluster", cluster_parser()),
                              ("python -m cluster.audit", audit_parser("local[*]")),
                              ("python -m store", store_parser())):
            parts += [f"## {title}", ""]
            for name, p, summary in commands(parser, title):
                parts += section(name, p, summary)
    return "\n".join(parts)

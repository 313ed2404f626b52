"""Reference pages of the documentation site, generated from the code: the CLI, the config keys, the metrics.

A page of docs/ asks for a reference with a marker line, `<!-- reference: NAME -->`, which
`fill` replaces by the generated Markdown: the MkDocs hook (docs/hooks/reference.py) calls it
for every page at every build, so the site cannot say what the code does not. NAME is one of
GENERATORS' keys; an unknown one fails the build.
"""
from __future__ import annotations

import re
from typing import Callable

from cluster.reference import cli_reference, config_reference, metrics_reference

GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli_reference.render,
    "config": config_reference.render,
    "metrics": metrics_reference.render,
}
MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->$", re.MULTILINE)


def fill(markdown: str) -> str:
    """`markdown` with each marker replaced by its generated reference."""
    def generated(m: re.Match) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            raise ValueError(f"unknown reference {name!r}: want one of {', '.join(GENERATORS)}")
        return GENERATORS[name]().rstrip("\n")
    return MARKER.sub(generated, markdown)

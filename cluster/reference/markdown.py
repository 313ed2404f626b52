"""Markdown pieces of the generated reference pages: table cells and rows."""
from __future__ import annotations

import re
from typing import Sequence

_CODE_SPAN = re.compile(r"(`[^`]*`)")


def prose(text: object, pipes: bool = False) -> str:
    """`text` as Markdown prose: a <name> outside code spans is shown, not taken for an HTML
    tag; with `pipes`, a pipe outside code spans does not end a table cell (in a code span it
    never does)."""
    def plain(p: str) -> str:
        p = p.replace("<", "&lt;").replace(">", "&gt;")
        return p.replace("|", "\\|") if pipes else p
    parts = _CODE_SPAN.split(str(text))
    return "".join(p if i % 2 else plain(p) for i, p in enumerate(parts))


def cell(text: object) -> str:
    """`text` safe inside a table cell: no pipe ends the cell, no <name> becomes an HTML tag,
    no line break ends the row."""
    return prose(" ".join(str(text).split()), pipes=True)


def code(text: object) -> str:
    """`text` as inline code in a cell (empty: an empty cell)."""
    s = str(text)
    if not s:
        return ""
    tick = "``" if "`" in s else "`"
    pad = " " if tick == "``" else ""
    return f"{tick}{pad}{s}{pad}{tick}"


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)

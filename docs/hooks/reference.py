"""MkDocs hook: fills the reference pages from the code at every build (`mkdocs build`,
`mkdocs serve`, `./scripts/docs`, tests/docs/test_site.py). A page asks for a reference with a
marker line, `<!-- reference: cli -->` (or `config`, `metrics`); cluster/reference/ generates
it, so the command, configuration and metrics references cannot drift from the code."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the checkout's packages, also where the venv has another
    sys.path.insert(0, str(ROOT))

from cluster.reference import fill  # noqa: E402


def on_page_markdown(markdown: str, page, config, files) -> str:
    return fill(markdown)

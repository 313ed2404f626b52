"""The layer picture of the architecture page (docs/concepts/architecture.md), drawn from the
import-linter contracts in pyproject.toml.

The contracts are the map (tests/test_layers.py runs them); this module renders their layers,
top to bottom, with each package's one-line summary (the first sentence of its `__init__`
docstring), so the picture cannot say something the contracts do not. `python -m
tests.support.layer_map` rewrites the block between the markers on that page;
tests/test_layers.py fails while the block differs from the rendering.
"""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BEGIN = "<!-- layers: drawn by `python -m tests.support.layer_map` from pyproject.toml -->"
END = "<!-- /layers -->"
SUMMARY_WIDTH = 76
PAGE = ROOT / "docs" / "concepts" / "architecture.md"


def contracts(root: Path = ROOT) -> dict[str, dict]:
    """The import-linter contracts of pyproject.toml by id."""
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def summary(package: str, root: Path = ROOT) -> str:
    """The first sentence of a package's docstring, clipped to SUMMARY_WIDTH."""
    init = root.joinpath(*package.split("."), "__init__.py")
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    text = " ".join(doc.split())
    m = re.match(r"(.+?\.)(\s|$)", text)
    first = m.group(1).rstrip(".") if m else text
    return first if len(first) <= SUMMARY_WIDTH else first[:SUMMARY_WIDTH - 3].rstrip() + "..."


def _rows(layers: list[str], prefix: str, root: Path) -> list[str]:
    rows = []
    for layer in layers:
        for i, name in enumerate(p.strip() for p in layer.split("|")):
            package = prefix + name
            label = ("  | " if i else " ") + package.replace(".", "/")
            rows.append(f"{label:<24}{summary(package, root)}")
    return rows


def render(root: Path = ROOT) -> str:
    """The picture: cluster's layers, then the top-level layers below cluster, top to bottom.
    Packages on one layer (`|` in the contract) are independent of each other."""
    c = contracts(root)
    cluster_layers = c["cluster"]["layers"]
    top_layers = c["top"]["layers"]
    assert top_layers[0] == "cluster", "the top layer of the top contract is cluster"
    rule = " " + "─" * 95
    rows = _rows(cluster_layers, "cluster.", root) + [rule] + _rows(top_layers[1:], "", root)
    return "\n".join(["```", *rows, "```"])


def block(root: Path = ROOT) -> str:
    return f"{BEGIN}\n{render(root)}\n{END}"


def current_block(text: str) -> str | None:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start:end + len(END)]


def main() -> int:
    path = PAGE
    text = path.read_text()
    old = current_block(text)
    if old is None:
        print(f"{path}: no block between {BEGIN!r} and {END!r}", file=sys.stderr)
        return 1
    path.write_text(text.replace(old, block()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Prints the project's runtime requirements that a node needs, one per line, from pyproject.toml.

pyspark (the audit) and matplotlib (its chart) run on an operator's machine, never on a node:
leaving them out keeps Java-sized dependencies out of the node image.
"""
import re
import sys
import tomllib

NOT_ON_NODES = {"pyspark", "matplotlib"}

with open(sys.argv[1], "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
for dep in deps:
    name = re.split(r"[<>=!~ \[;]", dep, maxsplit=1)[0].strip().lower()
    if name not in NOT_ON_NODES:
        print(dep)

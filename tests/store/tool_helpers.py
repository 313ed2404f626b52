"""Running the store tool in-process and damaging its demo stores: shared by the tests of
store/cli/, store/readonly/verify.py and store/readonly/."""
from __future__ import annotations

import hashlib
import json
import os

from store.cli.store_cli import main
from store.layout import COMMITLOG_DIR

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO_MESSAGES = 900
FILE_SIZE = 64 * 1024


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    rc, out, _ = run(capsys, *argv, "--json")
    return rc, json.loads(out)


def json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def tree_digest(root) -> dict[str, str]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def flip(path, pos: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(pos)
        b = fh.read(1)
        fh.seek(pos)
        fh.write(bytes([b[0] ^ 0xFF]))


def commitlog_file(root, offset: int):
    size = FILE_SIZE
    base = offset - offset % size
    return os.path.join(root, COMMITLOG_DIR, f"{base:020d}"), offset - base


# ---------------------------------------------------------------------------------------------

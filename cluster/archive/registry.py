"""The registry of archives: which archive answers which broker group over which time range.

A small JSON file that every archive of a deployment rewrites with its own entry (under an
exclusive flock, then atomically), and that `python -m cluster history` reads to ask only the
archives whose range matches a time-range query (every archive for an id or a key):

    {"archives": {"<archive id>": {"address": "host:port", "http": "host:port",
                                    "updated_ms": ms, "token_file": path (where its admin
                                    token lives, for tools on the same machine; "" if unknown),
                                    "groups": {"<group>": [first ms, last ms], ...}}}}
"""
from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass

from store.commitlog.fileio import DEFAULT_FILE_IO


@dataclass(frozen=True)
class ArchiveEntry:
    """One archive's entry in the registry file: where it answers (gRPC, HTTP), its admin
    token's file, when it last wrote, and each group's store-time range."""

    archive_id: str
    address: str
    http: str
    groups: dict[str, tuple[int, int]]
    updated_ms: int
    token_file: str = ""

    def may_hold(self, group: str, begin_ms: int, end_ms: int) -> bool:
        """Whether a time-range query of `group` ("" = any) can find something here."""
        for name, (first, last) in self.groups.items():
            if group and name != group:
                continue
            if first <= end_ms and last >= begin_ms:
                return True
        return False


def read_registry(path: str) -> list[ArchiveEntry]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return []
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not a registry of archives: {e}") from None
    out = []
    for ident, a in sorted(data.get("archives", {}).items()):
        out.append(ArchiveEntry(ident, a["address"], a.get("http", ""),
                                {g: (int(r[0]), int(r[1])) for g, r in a["groups"].items()},
                                int(a.get("updated_ms", 0)), a.get("token_file", "")))
    return out


def announce(path: str, entry: ArchiveEntry) -> None:
    """Write (or replace) this archive's entry, leaving the others as they are."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (FileNotFoundError, json.JSONDecodeError):
            data = {}
        archives = data.setdefault("archives", {})
        archives[entry.archive_id] = {"address": entry.address, "http": entry.http,
                                      "updated_ms": entry.updated_ms,
                                      "token_file": entry.token_file,
                                      "groups": {g: list(r) for g, r in entry.groups.items()}}
        DEFAULT_FILE_IO.write_file_atomic(path, json.dumps(data, indent=1).encode())

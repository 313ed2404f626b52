"""`python -m store inspect DIR [--json]`: files, offsets, consume queues, index and checkpoint
(read-only)."""
from __future__ import annotations

import argparse
import json
from typing import Any

from store.readonly.inspection import inspect_store
from store.readonly import StoreReader
from common.text_output import format_table
from store.cli.tool_common import EXIT_OK, add_command, emit


def register(sub: Any) -> None:
    sp = add_command(sub, "inspect",
                     "files, offsets, consume queues, index and checkpoint (read-only)")
    sp.add_argument("--json", action="store_true", help="one JSON document")
    sp.set_defaults(func=cmd_inspect)


def cmd_inspect(args: argparse.Namespace) -> int:
    with StoreReader(args.dir) as reader:
        info = inspect_store(reader)
    if args.json:
        emit(json.dumps(info, indent=2))
    else:
        print_inspect(info)
    return EXIT_OK


def print_inspect(info: dict[str, Any]) -> None:
    emit(f"store: {info['store']}")
    if info["abort"]:
        emit("last shutdown: NOT clean (abort file present: the store is running or crashed)")
    else:
        emit("last shutdown: clean (no abort file)")
    if info["lock_pid"] is not None:
        emit(f"lock file: last holder pid {info['lock_pid']} (not probed)")
    cl = info["commitlog"]
    emit("")
    emit(f"commitlog: {cl['dir']}")
    emit(f"  {len(cl['files'])} file(s) of {cl['file_size']} bytes; "
          f"min offset {cl['min_offset']}, max offset {cl['max_offset']}")
    if cl["files"]:
        rows = [[f["name"], f["size"], f["from_offset"], f["written"]] for f in cl["files"]]
        for line in format_table(["FILE", "SIZE", "FROM_OFFSET", "WRITTEN"], rows, {1, 2, 3}):
            emit("  " + line)
    cp = info["checkpoint"]
    emit("")
    state = "missing" if not cp["exists"] and not cp["damaged"] else (
        f"DAMAGED ({cp['damage_reason']})" if cp["damaged"] else "ok")
    emit(f"checkpoint: {state}")
    for name in ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp"):
        iso = cp[name.replace("Timestamp", "Time")]
        emit(f"  {name:<20} {cp[name]}" + (f"  ({iso})" if iso else ""))
    emit(f"  {'masterFlushedOffset':<20} {cp['masterFlushedOffset']}")
    emit(f"  {'confirmPhyOffset':<20} {cp['confirmPhyOffset']}")
    emit("")
    queues = info["consume_queues"]
    emit(f"consume queues: {len(queues)}")
    if queues:
        rows = [[q["topic"], q["queue_id"], q["files"], q["min_offset"], q["max_offset"],
                 q["max_phy_offset"]] for q in queues]
        for line in format_table(["TOPIC", "QUEUE", "FILES", "MIN_OFFSET", "MAX_OFFSET", "MAX_PHY_OFFSET"],
                           rows, {1, 2, 3, 4, 5}):
            emit("  " + line)
    emit("")
    ix = info["index"]["files"]
    emit(f"index files: {len(ix)}")
    if ix:
        rows = [[i["name"], i["entries"], i["hash_slots"], i["max_entries"], i["begin_time"],
                 i["end_time"], i["begin_phy_offset"], i["end_phy_offset"]] for i in ix]
        for line in format_table(["NAME", "ENTRIES", "SLOTS", "MAX_ENTRIES", "BEGIN_TIME", "END_TIME",
                            "BEGIN_PHY", "END_PHY"], rows, {1, 2, 3, 6, 7}):
            emit("  " + line)


"""What `python -m store inspect` reports about a store directory: files, offsets, consume
queues, index files, checkpoint and markers, read through the read-only StoreReader."""
from __future__ import annotations

import os
from typing import Any

from . import StoreReader
from common.text_output import iso_ms


def inspect_store(reader: StoreReader) -> dict[str, Any]:
    """Everything `inspect` shows, as a JSON-ready dict (the --json output)."""
    files = reader.commitlog_files
    cp = reader.checkpoint()
    max_offset = reader.valid_end()
    min_offset = reader.min_offset()
    cl_files = []
    for f in files:
        written = min(f.size, max(0, max_offset - f.base))
        cl_files.append({"name": f.name, "size": f.size, "from_offset": f.base,
                         "to_offset": f.end, "written": written})
    queues = []
    for q in reader.queues():
        last = q.last_real()
        queues.append({
            "topic": q.topic, "queue_id": q.queue_id, "files": len(q.files),
            "file_size": q.file_size,
            "min_offset": q.min_offset(min_offset), "max_offset": q.max_offset(),
            "max_phy_offset": (last[1][0] + last[1][1]) if last else None,
        })
    index = []
    for ix in reader.index_files():
        h = ix.header
        index.append({
            "name": ix.name, "size": ix.size, "entries": ix.entries,
            "hash_slots": ix.slots, "max_entries": ix.max_entries,
            "begin_timestamp": h.begin_timestamp if h else None,
            "begin_time": iso_ms(h.begin_timestamp) if h else None,
            "end_timestamp": h.end_timestamp if h else None,
            "end_time": iso_ms(h.end_timestamp) if h else None,
            "begin_phy_offset": h.begin_phy_offset if h else None,
            "end_phy_offset": h.end_phy_offset if h else None,
        })
    checkpoint = {
        "exists": cp.existed, "damaged": cp.damaged, "damage_reason": cp.damage_reason,
        "physicMsgTimestamp": cp.physic_msg_timestamp,
        "physicMsgTime": iso_ms(cp.physic_msg_timestamp),
        "logicsMsgTimestamp": cp.logics_msg_timestamp,
        "logicsMsgTime": iso_ms(cp.logics_msg_timestamp),
        "indexMsgTimestamp": cp.index_msg_timestamp,
        "indexMsgTime": iso_ms(cp.index_msg_timestamp),
        "masterFlushedOffset": cp.master_flushed_offset,
        "confirmPhyOffset": cp.confirm_phy_offset,
    }
    abort = reader.abort_exists
    return {
        "store": reader.root,
        "abort": abort,
        "clean_shutdown": not abort,
        "lock_file": os.path.exists(reader.paths.lock),
        "lock_pid": reader.lock_pid(),
        "commitlog": {
            "dir": reader.commitlog_dir, "file_size": reader.file_size, "files": cl_files,
            "min_offset": min_offset, "max_offset": max_offset,
        },
        "checkpoint": checkpoint,
        "consume_queues": queues,
        "index": {"dir": reader.index_dir, "files": index},
    }


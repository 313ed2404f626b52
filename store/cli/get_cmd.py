"""`python -m store get DIR --topic T --queue N [--offset O] [--count N] [--tag-filter "a||b"]`:
open the store (MessageStore load, clean shutdown) and read messages of one queue."""
from __future__ import annotations

import argparse
import os
from typing import Any

from store.layout import COMMITLOG_DIR, StoreLayout
from store.reader import TagFilter
from common.text_output import Progress, iso_ms
from store.cli.tool_common import (EXIT_DAMAGE, EXIT_OK, UsageError, add_command, add_config_option, body_lines,
                     body_preview, emit, err, json_line, nonneg_int, pos_int, progress_enabled,
                     record_dict)
from store.cli.open_store import build_store_config, open_store


def register(sub: Any) -> None:
    sp = add_command(sub, "get", "open the store and read messages of one queue")
    add_config_option(sp)
    sp.add_argument("--topic", required=True)
    sp.add_argument("--queue", type=nonneg_int, required=True)
    sp.add_argument("--offset", type=nonneg_int, help="queue offset (default: the queue's min)")
    sp.add_argument("--count", type=pos_int, default=32)
    sp.add_argument("--tag-filter", metavar="EXPR", help='e.g. "TagA||TagB" (default: all)')
    sp.add_argument("--json", action="store_true", help="JSON lines")
    sp.add_argument("--body", action="store_true", help="print whole bodies")
    sp.set_defaults(func=cmd_get)


def cmd_get(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.dir):
        raise UsageError(f"{args.dir}: no such directory")
    if not os.path.isdir(StoreLayout(args.dir).commitlog_dir):
        raise UsageError(f"{args.dir}: not a store directory (no {COMMITLOG_DIR}/)")
    try:
        TagFilter.parse(args.tag_filter)
    except ValueError as e:
        raise UsageError(str(e))
    config = build_store_config(args.dir, args.config)
    progress = Progress(progress_enabled(args))
    store = open_store(config, progress, "get")
    if store is None:
        return EXIT_DAMAGE
    shown = 0
    try:
        cq = store.cq_store.find(args.topic, args.queue)
        offset = args.offset if args.offset is not None else (cq.min_offset() if cq else 0)
        status = None
        result = None
        if not args.json:
            emit(f"{'QOFFSET':>8} {'OFFSET':>12} {'SIZE':>6} {'TAGS':<8} {'KEYS':<16} "
                  f"{'STORE_TIME':<29} BODY")
        while shown < args.count:
            result = store.get_messages(args.topic, args.queue, offset, args.count - shown,
                                        args.tag_filter)
            status = result.status
            for rec in result.messages:
                if args.json:
                    json_line(record_dict(rec.physical_offset, rec, full_body_text=args.body))
                else:
                    emit(f"{rec.queue_offset:>8} {rec.physical_offset:>12} {rec.total_size:>6} "
                          f"{rec.tags or '-':<8} {' '.join(rec.keys) or '-':<16} "
                          f"{iso_ms(rec.store_timestamp) or '-':<29} {body_preview(rec.body, 40)}")
                    if args.body:
                        for line in body_lines(rec.body):
                            emit(line)
                shown += 1
            if result.next_begin_offset <= offset or status.name not in ("FOUND", "NO_MATCHED_MESSAGE"):
                break
            offset = result.next_begin_offset
        if result is not None:
            err(f"get: {shown} message(s) from {args.topic}-{args.queue}; last status "
                 f"{status.value}, next offset {result.next_begin_offset}, queue offsets "
                 f"{result.min_offset}..{result.max_offset}")
    finally:
        store.shutdown()
    return EXIT_OK

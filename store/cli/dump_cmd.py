"""`python -m store dump DIR [--topic T] [--queue N] [--from OFFSET] [--limit N] [--json]
[--body]`: commitlog records as a table or JSON lines (read-only)."""
from __future__ import annotations

import argparse
from typing import Any

from store import codec
from store.codec import MessageRecord, RecordKind
from store.readonly import ScanResult, StoreReader
from common.text_output import Progress, iso_ms
from store.cli.tool_common import (EXIT_OK, UsageError, add_command, body_lines, emit, err, json_line, nonneg_int,
                     pos_int, progress_enabled, record_dict)


def register(sub: Any) -> None:
    sp = add_command(sub, "dump", "commitlog records as a table or JSON lines (read-only)")
    sp.add_argument("--topic", help="only this topic")
    sp.add_argument("--queue", type=nonneg_int, help="only this queue id")
    sp.add_argument("--from", dest="from_offset", type=nonneg_int, metavar="OFFSET",
                    help="physical offset to start at (default: the first record)")
    sp.add_argument("--limit", type=pos_int, metavar="N", help="at most N records")
    sp.add_argument("--json", action="store_true", help="JSON lines (body as base64 + preview)")
    sp.add_argument("--body", action="store_true", help="print message bodies")
    sp.set_defaults(func=cmd_dump)


_DUMP_HEADER = (f"{'OFFSET':>12} {'SIZE':>6} {'TOPIC':<16} {'Q':>3} {'QOFFSET':>8} "
                f"{'STORE_TIME':<29} {'TAGS':<8} {'KEYS':<16} {'BODY':>6} MSG_ID")


def _dump_row(offset: int, rec: MessageRecord) -> str:
    crc = "" if codec.body_crc(rec.body) == rec.body_crc else "  CRC-MISMATCH"
    return (f"{offset:>12} {rec.total_size:>6} {rec.topic:<16} {rec.queue_id:>3} "
            f"{rec.queue_offset:>8} {iso_ms(rec.store_timestamp) or '-':<29} "
            f"{rec.tags or '-':<8} {' '.join(rec.keys) or '-':<16} {len(rec.body):>6} "
            f"{rec.msg_id}{crc}")


def cmd_dump(args: argparse.Namespace) -> int:
    shown = 0
    scanned = 0
    with StoreReader(args.dir) as reader:
        start = args.from_offset if args.from_offset is not None else reader.min_offset()
        if reader.commitlog_files and start >= reader.files_end():
            raise UsageError(f"--from {start} is past the end of the commitlog files "
                             f"({reader.files_end()})")
        res = ScanResult()
        progress = Progress(progress_enabled(args))
        if not args.json:
            emit(_DUMP_HEADER)
        # No CRC in the walk: a record with a bad body CRC is shown (flagged) rather than
        # ending the dump; a record whose structure is broken ends it.
        for offset, f, pos, n in reader.scan(start, check_crc=False, result=res):
            scanned += 1
            progress.update(lambda: f"dump: offset {offset}, {scanned} records scanned")
            if args.topic is not None or args.queue is not None:
                head = codec.decode_dispatch_fields(f.view, pos, n)
                if args.topic is not None and head[5] != args.topic:
                    continue
                if args.queue is not None and head[0] != args.queue:
                    continue
            rec = codec.decode(f.view, pos, pos + n, check_crc=False)
            assert isinstance(rec, MessageRecord)
            if args.json:
                json_line(record_dict(offset, rec, full_body_text=args.body))
            else:
                emit(_dump_row(offset, rec))
                if args.body:
                    for line in body_lines(rec.body):
                        emit(line)
            shown += 1
            if args.limit is not None and shown >= args.limit:
                break
        progress.done()
    stopped = ""
    if res.stop_kind is not None and res.stop_kind is not RecordKind.EMPTY and (
            args.limit is None or shown < args.limit):
        stopped = f"; stopped at offset {res.valid_end}: {res.stop_reason}"
    err(f"dump: {shown} record(s) shown, {scanned} scanned{stopped}")
    return EXIT_OK

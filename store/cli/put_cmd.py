"""`python -m store put DIR --topic T [--queue N] [--tag X] [--keys "a b"] [--body TEXT |
--body-file F] [--count N]`: open the store (MessageStore load/start, clean shutdown) and put
messages."""
from __future__ import annotations

import argparse
import os
from typing import Any

from store import codec
from store.codec import Message
from common.text_output import Progress, parse_size
from store.cli.tool_common import (EXIT_DAMAGE, EXIT_OK, UsageError, add_command, add_config_option, emit, err,
                     json_line, nonneg_int, pos_int, progress_enabled)
from store.cli.open_store import (TOOL_COMMIT_LOG_FILE_SIZE, UniqIdGen, build_store_config, open_store,
                         wait_dispatched)


def register(sub: Any) -> None:
    sp = add_command(sub, "put", "open the store and put messages")
    add_config_option(sp)
    sp.add_argument("--topic", required=True)
    sp.add_argument("--queue", type=nonneg_int, default=0)
    sp.add_argument("--tag")
    sp.add_argument("--keys", help='space-separated keys, e.g. "a b"')
    body = sp.add_mutually_exclusive_group()
    body.add_argument("--body", help="body text (UTF-8)")
    body.add_argument("--body-file", metavar="FILE", help="body bytes from a file")
    sp.add_argument("--count", type=pos_int, default=1)
    sp.add_argument("--file-size", type=parse_size, metavar="BYTES",
                    help=f"commitlog file size of a new store (default {TOOL_COMMIT_LOG_FILE_SIZE})")
    sp.add_argument("--json", action="store_true", help="JSON lines")
    sp.set_defaults(func=cmd_put)


def cmd_put(args: argparse.Namespace) -> int:
    if args.body is not None and args.body_file is not None:
        raise UsageError("give --body or --body-file, not both")
    if args.body_file is not None:
        try:
            with open(args.body_file, "rb") as fh:
                body = fh.read()
        except OSError as e:
            raise UsageError(f"cannot read {args.body_file}: {e}")
    else:
        body = (args.body if args.body is not None else "Hello from rmq-store").encode("utf-8")
    os.makedirs(args.dir, exist_ok=True)
    config = build_store_config(args.dir, args.config, args.file_size)
    progress = Progress(progress_enabled(args))
    ids = UniqIdGen()
    store = open_store(config, progress, "put")
    if store is None:
        return EXIT_DAMAGE
    failed = None
    written = 0
    try:
        store.start()
        remaining = args.count
        while remaining > 0 and failed is None:
            batch = []
            for _ in range(min(remaining, 256)):
                props = {codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: ids.next()}
                if args.tag:
                    props[codec.PROPERTY_TAGS] = args.tag
                if args.keys:
                    props[codec.PROPERTY_KEYS] = args.keys
                batch.append(Message(args.topic, body, args.queue, props))
            result = store.put_messages(batch)
            if not result.ok:
                failed = result
                break
            for msg, a in zip(batch, result.appends):
                written += 1
                uniq = msg.properties[codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
                if args.json:
                    json_line({"status": result.status.value, "topic": args.topic,
                                "queue_id": args.queue, "offset": a.wrote_offset,
                                "size": a.wrote_bytes, "queue_offset": a.queue_offset,
                                "store_timestamp": a.store_timestamp, "msg_id": a.msg_id,
                                "uniq_key": uniq})
                else:
                    emit(f"{result.status.value} offset={a.wrote_offset} size={a.wrote_bytes} "
                          f"queue={args.topic}-{args.queue} queueOffset={a.queue_offset} "
                          f"msgId={a.msg_id} uniqKey={uniq}")
            remaining -= len(batch)
            progress.update(lambda: f"put: {written}/{args.count} messages")
        wait_dispatched(store)
    finally:
        progress.done()
        store.shutdown()
    if failed is not None:
        err(f"put: {failed.status.value}" + (f": {failed.reason}" if failed.reason else "")
             + f" ({written} of {args.count} written)")
        return EXIT_DAMAGE
    err(f"put: {written} message(s) stored in {args.topic}-{args.queue}")
    return EXIT_OK

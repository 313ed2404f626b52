"""`python -m store demo DIR --messages N [--file-size BYTES]`: write demo messages (three
topics of four queues, tags, keys, bodies of varied sizes) into a fresh store."""
from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import time
from typing import Any

from store import codec
from store.codec import Message
from store.layout import StoreLayout, is_offset_file_name
from store.readonly import numbered_files
from common.text_output import Progress, human_bytes, parse_size
from store.cli.tool_common import (EXIT_DAMAGE, EXIT_OK, UsageError, add_command, add_config_option, emit, err,
                     pos_int, progress_enabled)
from store.cli.open_store import (TOOL_COMMIT_LOG_FILE_SIZE, UniqIdGen, build_store_config, open_store,
                         wait_dispatched)

DEMO_TOPICS = ("DemoOrders", "DemoPayments", "DemoAudit")
DEMO_QUEUES = 4
DEMO_TAGS = ("TagA", "TagB", "TagC")


def register(sub: Any) -> None:
    sp = add_command(sub, "demo", "write demo messages into a fresh store")
    add_config_option(sp)
    sp.add_argument("--messages", type=pos_int, required=True, metavar="N")
    sp.add_argument("--file-size", type=parse_size, metavar="BYTES",
                    help=f"commitlog file size (default {TOOL_COMMIT_LOG_FILE_SIZE})")
    sp.add_argument("--batch", type=pos_int, default=128, help=argparse.SUPPRESS)
    sp.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    sp.set_defaults(func=cmd_demo)


def _demo_body(i: int, topic: str, rng: random.Random, max_pad: int) -> bytes:
    roll = rng.random()
    if roll < 0.6:
        pad = rng.randint(0, 120)
    elif roll < 0.95:
        pad = rng.randint(200, 1500)
    elif roll < 0.995:
        pad = rng.randint(2000, 8000)
    else:
        pad = rng.randint(16_000, 64_000)
    pad = min(pad, max_pad)
    doc = {"id": i, "topic": topic, "amount": round(rng.uniform(1, 1000), 2),
           "note": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(min(pad, 64)))}
    text = json.dumps(doc)
    if pad > 64:
        text = text[:-1] + ', "pad": "' + "x" * (pad - 64) + '"}'
    return text.encode("utf-8")


def cmd_demo(args: argparse.Namespace) -> int:
    root = args.dir
    if os.path.exists(root) and not os.path.isdir(root):
        raise UsageError(f"{root} exists and is not a directory")
    existing = numbered_files(StoreLayout(root).commitlog_dir, is_offset_file_name)
    if existing:
        raise UsageError(f"{root} already holds a commitlog ({len(existing)} file(s)); "
                         f"demo writes into a fresh directory only")
    os.makedirs(root, exist_ok=True)
    config = build_store_config(root, args.config, args.file_size)
    progress = Progress(progress_enabled(args))
    rng = random.Random(args.seed)
    max_pad = max(0, min(config.max_message_size, config.mapped_file_size_commit_log // 4) - 256)
    ids = UniqIdGen()
    t0 = time.monotonic()
    store = open_store(config, progress, "demo")
    if store is None:
        return EXIT_DAMAGE
    written = 0
    nbytes = 0
    failed = None
    try:
        store.start()
        for first in range(0, args.messages, args.batch):
            batch = []
            for i in range(first, min(args.messages, first + args.batch)):
                topic = DEMO_TOPICS[i % len(DEMO_TOPICS)]
                queue = (i // len(DEMO_TOPICS)) % DEMO_QUEUES
                tag = DEMO_TAGS[(i // (len(DEMO_TOPICS) * DEMO_QUEUES)) % len(DEMO_TAGS)]
                props = {codec.PROPERTY_TAGS: tag, codec.PROPERTY_KEYS: f"order-{i}",
                         codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: ids.next()}
                batch.append(Message(topic, _demo_body(i, topic, rng, max_pad), queue, props))
            result = store.put_messages(batch)
            if not result.ok:
                failed = result
                break
            written += len(batch)
            nbytes += sum(a.wrote_bytes for a in result.appends)
            progress.update(lambda: f"demo: {written}/{args.messages} messages "
                                    f"({100 * written // args.messages}%), {human_bytes(nbytes)}")
        progress.done()
        wait_dispatched(store)
        end = store.max_phy_offset()
        n_files = len(store.commitlog.queue.snapshot())
    finally:
        progress.done()
        store.shutdown()
    if failed is not None:
        err(f"demo: put failed after {written} messages: {failed.status.value} {failed.reason}")
        return EXIT_DAMAGE
    secs = max(time.monotonic() - t0, 1e-6)
    q = shlex.quote(os.path.abspath(root))
    emit(f"demo: wrote {written} messages ({human_bytes(nbytes)}) to {os.path.abspath(root)} "
          f"in {secs:.1f} s ({written / secs:.0f} msg/s)")
    emit(f"  commitlog: {n_files} file(s) of {human_bytes(config.mapped_file_size_commit_log)}, "
          f"offsets 0..{end}")
    emit(f"  topics: {', '.join(DEMO_TOPICS)} ({DEMO_QUEUES} queues each); tags "
          f"{'/'.join(DEMO_TAGS)}; keys order-0..order-{max(written - 1, 0)}; UNIQ_KEY on each")
    emit("try:")
    emit(f"  python -m store inspect {q}")
    emit(f"  python -m store dump {q} --topic {DEMO_TOPICS[0]} --queue 0 --limit 10")
    emit(f"  python -m store verify {q}")
    emit(f"  python -m store get {q} --topic {DEMO_TOPICS[0]} --queue 0 --count 5 "
          f"--tag-filter 'TagA||TagB'")
    return EXIT_OK

"""What the duplicate window adds to a store's restart: the walk of the last window's records
(store/dedup/rebuild.py), next to the same load() with the window off, in the same run.

    python -m tests.perf.bench_dedup_rebuild [--messages 500000] [--body 1024] [--rounds 3]

A store is filled with `--messages` messages (one topic, 8 queues, TAGS, KEYS and a 34-character
UNIQ_KEY like the official clients', batches of 128) well inside the window, so the window is
full at the restart: the default is the default duplicateWindowMaxEntries (500,000). Then it is
loaded `--rounds` times with duplicateWindowSeconds=120 and with 0, alternating (page cache
warm: the same files each time), and each load()'s time is printed with the rebuild's own
(the consume-queue search and the walk), the records it walked and the ids it holds.

Not a test: nothing asserts on time. The machine is shared and noisy: compare the figures of one
run side by side.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from common.text_output import format_table
from store import running_flags as rf
from store.codec import Message
from store.config import StoreConfig
from store.message_store import MessageStore

from .bench_store import REPO_ROOT

TOPIC = "BenchRebuild"
QUEUES = 8
BATCH = 128
FILE_SIZE = 256 << 20


def messages(start: int, n: int, body: bytes) -> list[Message]:
    return [Message(TOPIC, body, i % QUEUES,
                    {"UNIQ_KEY": f"01C0A80001{os.getpid() & 0xFFFF:04X}{i:020X}",
                     "TAGS": "TagA", "KEYS": f"order-{i}"}, born_timestamp=1)
            for i in range(start, start + n)]


def fill(root: str, n: int, body: bytes) -> float:
    store = MessageStore(StoreConfig(store_path_root_dir=root,
                                     mapped_file_size_commit_log=FILE_SIZE))
    store.start()
    try:
        t0 = time.perf_counter()
        for start in range(0, n, BATCH):
            result = store.put_messages(messages(start, min(BATCH, n - start), body))
            if not result.ok:
                raise RuntimeError(f"fill: {result.status} {result.reason}")
        while store.dispatch_behind:
            time.sleep(0.05)
        return time.perf_counter() - t0
    finally:
        store.shutdown()


def load(root: str, window_seconds: int) -> tuple[float, MessageStore]:
    store = MessageStore(StoreConfig(store_path_root_dir=root,
                                     mapped_file_size_commit_log=FILE_SIZE,
                                     duplicate_window_seconds=window_seconds))
    t0 = time.perf_counter()
    store.load()
    return time.perf_counter() - t0, store


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.perf.bench_dedup_rebuild",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=500_000)
    p.add_argument("--body", type=int, default=1024, help="body bytes")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    root = tempfile.mkdtemp(prefix=".bench-rebuild-", dir=os.path.join(REPO_ROOT, "tests", "perf"))
    try:
        fill_s = fill(root, args.messages, b"x" * args.body)
        print(f"filled {args.messages:,} messages of {args.body} bytes in {fill_s:.1f} s",
              flush=True)
        rows = []
        for r in range(args.rounds):
            for seconds in ((120, 0) if r % 2 == 0 else (0, 120)):
                dt, store = load(root, seconds)
                rebuilt = store.duplicates_rebuilt
                store.flags.set(rf.SHUTDOWN, "bench")
                store.shutdown()
                assert rebuilt is not None
                rows.append((str(r + 1), "on" if seconds else "off", f"{dt:.2f}",
                             f"{rebuilt.seconds:.2f}", f"{rebuilt.records:,}",
                             f"{rebuilt.entries:,}", f"{(rebuilt.end - rebuilt.start) >> 20:,}"))
                print(f"  round {r + 1} window {'on ' if seconds else 'off'}: load() {dt:.2f} s",
                      flush=True)
        print("\n".join(format_table(("round", "window", "load() s", "rebuild s", "records walked",
                                      "ids held", "MiB walked"), rows, right={2, 3, 4, 5, 6},
                                     rule=True)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The floor of a SYNC_FLUSH group commit with Python threads on this disk.

A model with none of the store's work: each thread copies a 1,100-byte record into a shared
mmap under a lock, then waits until a flush covers it; a waiter that finds no flush in progress
becomes the leader and msyncs (through libc, without the GIL, as `store.commitlog.fileio` does)
everything appended so far, while the others append and wait on one condition. No encoding,
no consume queue, no checkpoint. What 8 threads reach here is the most the store's group
commit could reach with 8 single-message putters on the same disk and interpreter, whatever
it does: `bench_store --only sync` prints it next to the store's figure.

    .venv/bin/python -m tests.perf.group_commit_floor            # 8 and 16 threads, 2 s each
    .venv/bin/python -m tests.perf.group_commit_floor --threads 8 --work-us 0 12 25
"""
from __future__ import annotations

import argparse
import mmap
import os
import tempfile
import threading
import time
from dataclasses import dataclass

from store.commitlog.fileio import DEFAULT_FILE_IO

RECORD = b"x" * 1100
FILE_SIZE = 256 << 20


@dataclass(frozen=True)
class FloorResult:
    threads: int
    rate: float  # messages per second
    per_round: float  # messages one flush covered on average


def run(directory: str, threads: int = 8, seconds: float = 2.0, work_us: float = 0.0
        ) -> FloorResult:
    """`threads` putters for `seconds` over a fresh file in `directory` (removed after). With
    `work_us`, each put first spends about that long running Python (holding the GIL), as
    the store's encoding and bookkeeping do."""
    path = os.path.join(directory, "group-commit-floor")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, FILE_SIZE)
        mm = mmap.mmap(fd, FILE_SIZE)
        try:
            return _run(mm, path, threads, seconds, _spins(work_us))
        finally:
            mm.close()
    finally:
        os.close(fd)
        os.unlink(path)


def _spins(work_us: float) -> int:
    """Iterations of an empty Python loop that take about `work_us` on this host."""
    if work_us <= 0:
        return 0
    n = 200_000
    started = time.perf_counter()
    for _ in range(n):
        pass
    return max(1, round(work_us * 1e-6 * n / (time.perf_counter() - started)))


def _run(mm: mmap.mmap, path: str, threads: int, seconds: float, spins: int) -> FloorResult:
    put_lock = threading.Lock()
    cond = threading.Condition()
    state = {"wrote": 0, "flushed": 0, "leading": False, "rounds": 0}
    counts = [0] * threads
    stop = threading.Event()
    limit = FILE_SIZE - len(RECORD)

    def put() -> int:
        for _ in range(spins):
            pass
        with put_lock:
            pos = state["wrote"]
            if pos > limit:  # the file is full: stop this putter (never reached in 2 s here)
                stop.set()
                return pos
            mm[pos:pos + len(RECORD)] = RECORD
            state["wrote"] = end = pos + len(RECORD)
            return end

    def wait_flushed(end: int) -> None:
        with cond:
            while state["flushed"] < end:
                if state["leading"]:
                    cond.wait()
                    continue
                state["leading"] = True
                start, target = state["flushed"], state["wrote"]
                cond.release()
                try:
                    DEFAULT_FILE_IO.msync(mm, start, target - start, path)
                finally:
                    cond.acquire()
                state["flushed"] = target
                state["leading"] = False
                state["rounds"] += 1
                cond.notify_all()

    def putter(k: int) -> None:
        n = 0
        while not stop.is_set():
            wait_flushed(put())
            n += 1
        counts[k] = n

    workers = [threading.Thread(target=putter, args=(k,), name=f"floor-{k}") for k in range(threads)]
    started = time.perf_counter()
    for t in workers:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - started
    total = sum(counts)
    return FloorResult(threads, total / elapsed, total / max(1, state["rounds"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--work-us", type=float, nargs="+", default=[0.0],
                        help="Python work per put before its append (each value one run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gc-floor-") as d:
        for work in args.work_us:
            for n in args.threads:
                r = run(d, n, args.seconds, work)
                print(f"{n:>3} threads, {work:>4.0f} us of Python per put: {r.rate:>9,.0f} msg/s, "
                      f"{r.per_round:.1f} messages a flush")


if __name__ == "__main__":
    main()

"""Many waiting consumers on one node: 2,000 long-polling ReceiveMessage calls (issue 14 item 3).

    python -m tests.perf.bench_long_poll [--quick] [--consumers 2000] [--producers 4]
           [--batch 128] [--seconds S] [--form stream|one]

An ASYNC_MASTER node process (tests/integration/harness, default store settings) and, in the
same run, side by side:
  1. producers alone: `--producers` threads of send_batch(`--batch`) for `--seconds`;
  2. `--consumers` long-polling consumers (tests/perf/long_poll_consumers.py, one process,
     grpc.aio) open their calls on an empty topic and wait; the same producers send to another
     topic: the produce rate while the node holds every wait, its RSS and thread count;
  3. the same producers on the consumers' topic while they receive and ack: both rates, the
     node's peak RSS (sampled every 100 ms), and the consumers' totals.
Printed: produce rates (ratios to alone), node RSS idle / all waiting / peak next to the
256 MiB budget, judged on anonymous memory (heap and stacks: what a waiting call costs; RSS
also counts the mapped commitlog pages the node touched, page cache the kernel reclaims, and
is printed beside it), messages received and acked, receives answered "no
new message" early (a wait the server did not hold: must be 0), errors.

Not a test: nothing asserts on time; the machine is shared (2 cores here for the node, the
producers and the consumers' process together).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from common.text_output import format_table
from tests.integration.harness import Group

from . import messaging_load as load
from .bench_store import REPO_ROOT

TOPIC, GROUP = "LongPollTopic", "LongPollGroup"
MIB = 1 << 20
BUDGET_MIB = 256


class RssSampler:
    """The peak RSS and anonymous memory of one process, and the peak anonymous memory of it
    and its children (a node's index and conversion processes: their memory is the node's
    too), sampled every `interval` s while entered."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.process = psutil.Process(pid)
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self.peak_anon = 0
        self.peak_anon_with_children = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            anon = anon_bytes(self.pid)
            self.peak_anon = max(self.peak_anon, anon)
            self.peak_anon_with_children = max(self.peak_anon_with_children,
                                               anon + children_anon_bytes(self.process))
            self._stop.wait(self.interval)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def children_anon_bytes(process: psutil.Process) -> int:
    """RssAnon of the process's children together (0 for one that ended meanwhile)."""
    total = 0
    for child in process.children(recursive=True):
        try:
            total += anon_bytes(child.pid)
        except (OSError, psutil.Error):
            pass
    return total


def anon_bytes(pid: int) -> int:
    """RssAnon of the process (Linux): its heap and stacks, without mapped files."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def start_consumers(endpoint: str, consumers: int, poll: float,
                    form: str = "stream") -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.perf.long_poll_consumers", "--endpoint", endpoint,
         "--topic", TOPIC, "--group", GROUP, "--consumers", str(consumers),
         "--poll", str(poll), "--form", form], cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line or json.loads(line).get("event") != "ready":
        proc.kill()
        raise RuntimeError(f"the consumers did not start: {line!r}")
    return proc


def stop_consumers(proc: subprocess.Popen) -> dict:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    line = proc.stdout.readline()
    proc.wait(30)
    return json.loads(line) if line else {"error": f"no totals (exit {proc.returncode})"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.perf.bench_long_poll",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 s per rate instead of 8")
    p.add_argument("--consumers", type=int, default=2000)
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seconds", type=float)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker.conf key of the node (repeatable)")
    p.add_argument("--form", choices=("stream", "one"), default="stream",
                   help="consumers receive over the v2 stream, or through ReceiveMessages "
                        "(one response, what cluster/client uses)")
    args = p.parse_args(argv)
    seconds = args.seconds or (3.0 if args.quick else 8.0)
    root = tempfile.mkdtemp(prefix=".bench-lp-", dir=os.path.join(REPO_ROOT, "tests", "perf"))
    group = Group(root)
    consumers = None
    try:
        master = group.master("ASYNC_MASTER", **dict(kv.split("=", 1) for kv in args.set))
        node = psutil.Process(master.pid)
        addr = master.address
        print(f"bench_long_poll: {args.consumers} consumers ({args.form} receives), "
              f"{args.producers} producers x "
              f"send_batch({args.batch}), {seconds:.0f} s per rate, {os.cpu_count()} CPUs",
              flush=True)
        alone = load.batched_send_rate(addr, "LongPollWarm", args.producers, args.batch, seconds)
        idle_rss = node.memory_info().rss
        idle_anon = anon_bytes(master.pid)
        load.fill(addr, TOPIC, 1)  # creates the topic; the consumers take this one at once
        consumers = start_consumers(addr, args.consumers, poll=20.0, form=args.form)
        time.sleep(2.0)  # every call re-issued after the first message, now all waiting
        waiting_rss, waiting_threads = node.memory_info().rss, node.num_threads()
        waiting_anon = anon_bytes(master.pid)
        beside = load.batched_send_rate(addr, "LongPollWarm", args.producers, args.batch,
                                        seconds)
        with RssSampler(master.pid) as rss:
            loaded = load.batched_send_rate(addr, TOPIC, args.producers, args.batch, seconds)
            time.sleep(3.0)  # let the consumers finish what was sent
        totals = stop_consumers(consumers)
        consumers = None
    finally:
        if consumers is not None:
            consumers.kill()
            consumers.wait(10)
        group.close()
        shutil.rmtree(root, ignore_errors=True)

    def ratio(rate: load.Rate) -> str:
        return f"{rate.value / alone.value:.2f}x of alone" if alone.value else ""
    rows = [
        ("produce alone", f"{alone.value:,.0f} msg/s", ""),
        (f"produce, {args.consumers} consumers waiting", f"{beside.value:,.0f} msg/s",
         ratio(beside) + " (another topic)"),
        (f"produce to {args.consumers} consumers", f"{loaded.value:,.0f} msg/s",
         ratio(loaded) + " (they receive + ack it)"),
        ("node RSS idle", f"{idle_rss / MIB:.0f} MiB", f"anonymous {idle_anon / MIB:.0f} MiB"),
        (f"node RSS, {args.consumers} calls waiting", f"{waiting_rss / MIB:.0f} MiB",
         f"anonymous {waiting_anon / MIB:.0f} MiB; budget {BUDGET_MIB} MiB; "
         f"{waiting_threads} threads"),
        ("node anonymous memory peak under load", f"{rss.peak_anon / MIB:.0f} MiB",
         f"{'PASS' if rss.peak_anon < BUDGET_MIB * MIB else 'MISS'} (budget {BUDGET_MIB} MiB); "
         f"RSS peak {rss.peak / MIB:.0f} MiB with the mapped commitlog pages"),
        ("... with its child processes", f"{rss.peak_anon_with_children / MIB:.0f} MiB",
         f"{'PASS' if rss.peak_anon_with_children < BUDGET_MIB * MIB else 'MISS'} (the index "
         f"and conversion processes' anonymous memory added)"),
        ("consumers received / acked",
         f"{totals.get('received', 0):,} / {totals.get('acked', 0):,}",
         f"of {loaded.value * seconds:,.0f} sent under load (approx.)"),
        ("receives answered early (not held)", str(totals.get("empty_early", "?")),
         "must be 0"),
        ("consumer errors", str(totals.get("errors", "?")), totals.get("first_error", "")[:400]),
        ("calls the grpc.aio client cancelled itself", str(totals.get("client_cancelled", "?")),
         "reissued (see long_poll_consumers.py)"),
    ]
    if alone.errors or beside.errors or loaded.errors:
        rows.append(("producer errors", f"{alone.errors} / {beside.errors} / {loaded.errors}",
                     (alone.first_error or beside.first_error or loaded.first_error)[:80]))
    print()
    print("\n".join(format_table(None, rows, right={1}, indent="  ")))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Side-by-side comparison: our node (RocketMQ 5 gRPC API) against NATS JetStream and Redis
streams, all on this machine, one system after the other, the same workloads and bodies.

    python -m tests.perf.compare [--quick] [--repeat N] [--out perf-report/]
           [--only ours-async,nats-r1,...]

Systems (compare_systems.SYSTEMS): ours as ASYNC_MASTER + ASYNC_FLUSH, ASYNC_MASTER + SYNC_FLUSH
and SYNC_MASTER with two slaves; NATS JetStream R1 and R3 (file storage); Redis streams with
appendonly and appendfsync everysec / always. Workloads (1 KiB bodies), each repeated N times:
  produce_x1 / x4  batched produce, 1 or 4 producer processes, batches of `window` messages with
                   one batch in flight per producer (sent, then every ack awaited)
  seq              sequential single-message sends, each awaited: p50 / p99 / p99.9
  consume          receive (up to 32) + ack of a pre-filled backlog, one consumer process
  consume_ahead    ours only: the same with two receives in flight (cluster.client.ReceiveAhead)
  e2e              one producer at a fixed rate and one consumer together: end-to-end p50 / p99
Server CPU per message: psutil cpu_times of every server pid around produce_x4. The share of CPU
the host stole while each system ran (tests/perf/host_load.py) is reported with them. The disk
is synced between systems.
Writes report.md, report.json and chart.png to --out. Not a test: nothing asserts on time.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

from . import compare_clients as clients
from . import compare_systems as systems
from .compare_report import Results, write_report
from .host_load import CpuWindow, StealWindow


@dataclass(frozen=True)
class Plan:
    """Message counts of one repeat (the same for every system)."""
    produce_x1: int
    produce_x4: int  # in all, split over the 4 producers
    window: int
    warmup: int  # per producer, before the clock
    seq: int
    consume: int
    e2e_rate: float  # msg/s
    e2e_count: int
    repeat: int
    file_mib: int

    def describe(self) -> str:
        return (f"produce {self.produce_x1} msgs (x1) and {self.produce_x4} (x4) in batches of "
                f"{self.window} after {self.warmup} warm-up msgs per producer; {self.seq} "
                f"sequential sends; consume of a {self.consume}-msg backlog; e2e "
                f"{self.e2e_count} msgs at {self.e2e_rate:.0f} msg/s (first 10% not counted)")


QUICK = dict(produce_x1=4000, produce_x4=8000, window=128, warmup=512, seq=300, consume=4000,
             e2e_rate=500, e2e_count=1000, repeat=2, file_mib=128)
FULL = dict(produce_x1=16000, produce_x4=32000, window=128, warmup=1024, seq=2000,
            consume=16000, e2e_rate=1000, e2e_count=6000, repeat=3, file_mib=512)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def _warm_worker() -> None:
    """Imports every client once per pool process, so no workload pays for them."""
    import nats  # noqa: F401
    import redis  # noqa: F401

    import cluster.client  # noqa: F401


class Runner:
    """Runs the workloads of one repeat against one started system through the client pool,
    recording figures into `results`."""

    def __init__(self, pool, plan: Plan, results: Results) -> None:
        self.pool = pool
        self.plan = plan
        self.results = results

    def produce(self, run: systems.Running, topic: str, producers: int, total: int,
                cpu: bool = False) -> float:
        clients.prepare(run.spec, topic)
        per = total // producers
        start_at = time.time() + 0.5 + 0.002 * self.plan.warmup  # after every warm-up
        window = CpuWindow(run.pids if cpu else {})
        with window:
            jobs = [self.pool.apply_async(clients.produce, (run.spec, topic, per,
                                                            self.plan.window, self.plan.warmup,
                                                            start_at))
                    for _ in range(producers)]
            outs = [j.get(600) for j in jobs]
        sent = producers * (per + self.plan.warmup)  # CPU covers the warm-up too
        for name, us in window.per_message(sent).items():
            self.results.add_cpu(run.key, name, us)
        # The union of the producers' windows: a late starter lowers the rate, never raises it.
        span = max(o["end"] for o in outs) - min(o["start"] for o in outs)
        return sum(o["count"] for o in outs) / span

    def repeat(self, run: systems.Running, rep: int) -> None:
        key, plan, add = run.key, self.plan, self.results.add
        add(key, "produce_x1", self.produce(run, f"px1r{rep}", 1, plan.produce_x1))
        add(key, "produce_x4", self.produce(run, f"px4r{rep}", 4, plan.produce_x4, cpu=True))
        topic = f"seqr{rep}"
        clients.prepare(run.spec, topic)
        lat = self.pool.apply(clients.sequential, (run.spec, topic, plan.seq, plan.seq // 10))
        for name, p in (("seq_p50", 50), ("seq_p99", 99), ("seq_p999", 99.9)):
            add(key, name, percentile(lat, p))
        self.consume(run, rep)
        if run.spec["kind"] == "ours":
            self.consume(run, rep, ahead=2)
        self.e2e(run, rep)

    def consume(self, run: systems.Running, rep: int, ahead: int = 0) -> None:
        """The consume workload; `ahead` > 0: ours with that many receives in flight
        (cluster.client.ReceiveAhead), the figure consume_ahead."""
        topic, group = f"con{'a' if ahead else ''}r{rep}", f"g{'a' if ahead else ''}{rep}"
        clients.prepare(run.spec, topic, group)
        per = self.plan.consume // 4
        fill = [self.pool.apply_async(clients.produce, (run.spec, topic, per, 256, 0, 0.0))
                for _ in range(4)]
        for j in fill:
            j.get(600)
        run.wait_dispatched()  # ours: the consume queues are built before the clock starts
        out = self.pool.apply(clients.consume, (run.spec, topic, group, per * 4, 32, 120.0),
                              dict(ahead=ahead))
        metric = "consume_ahead" if ahead else "consume"
        if out["count"] < per * 4:
            self.results.notes.append(f"{run.key} repeat {rep}: {metric} got {out['count']} "
                                      f"of {per * 4} within 120 s")
        self.results.add(run.key, metric, out["count"] / (out["end"] - out["start"]))

    def e2e(self, run: systems.Running, rep: int) -> None:
        topic, group, n = f"e2er{rep}", f"e{rep}", self.plan.e2e_count
        clients.prepare(run.spec, topic, group)
        # the producer sends one at a time: a system slower than the pace (a SYNC_MASTER under
        # load) takes longer than n / rate, and the consumer must still see every message. It
        # returns once it has them all, so the limit only matters when it does not: room for
        # sends of 20 ms each (a SYNC_MASTER on a slow day took 7.4 ms at p50, 15 at p99, and
        # a limit of 3 n / rate + 30 s cut its consumer off at 3.2k-3.7k of 6,000)
        limit = max(3 * n / self.plan.e2e_rate, 0.02 * n) + 30
        consumer = self.pool.apply_async(clients.consume,
                                         (run.spec, topic, group, n, 32, limit, True))
        start_at = time.time() + 1.5  # the consumer is waiting by then
        self.pool.apply(clients.paced_produce, (run.spec, topic, n, self.plan.e2e_rate, start_at))
        out = consumer.get(limit + 60)
        lat = [ms for seq, ms in out["latency"].items() if seq >= n // 10]
        if len(out["latency"]) < n:
            self.results.notes.append(f"{run.key} repeat {rep}: e2e consumer saw "
                                      f"{len(out['latency'])} of {n} messages")
        if lat:
            self.results.add(run.key, "e2e_p50", percentile(lat, 50))
            self.results.add(run.key, "e2e_p99", percentile(lat, 99))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.perf.compare",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small counts, 2 repeats (~3 min)")
    p.add_argument("--repeat", type=int, help="repeats of every workload (default 3, quick 2)")
    p.add_argument("--out", default="perf-report", help="report folder (default perf-report/)")
    p.add_argument("--only", default=",".join(systems.SYSTEMS),
                   help="comma-separated subset of " + ",".join(systems.SYSTEMS))
    args = p.parse_args(argv)
    keys = [k.strip() for k in args.only.split(",") if k.strip()]
    if any(k not in systems.SYSTEMS for k in keys):
        p.error(f"--only takes {', '.join(systems.SYSTEMS)}")
    sizes = dict(QUICK if args.quick else FULL)
    if args.repeat:
        sizes["repeat"] = args.repeat
    plan = Plan(**sizes)
    systems.ensure_peer_binaries()
    results = Results(systems=[systems.SYSTEMS[k] for k in keys])
    results.meta = {
        "command": "python -m tests.perf.compare" + (" --quick" if args.quick else "")
        + (f" --repeat {args.repeat}" if args.repeat else ""),
        "cpus": os.cpu_count(), "platform": f"{platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}", "repeat": plan.repeat, "plan": plan.describe(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "versions": {b: systems.version(b) for b in systems.PACKAGES}}
    results.notes.append("peer versions: " + "; ".join(results.meta["versions"].values()))
    parent = tempfile.mkdtemp(prefix="rmq-compare-")
    t0 = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")  # fresh client processes: no forked gRPC state
    print(f"compare: {'quick' if args.quick else 'full'} run, {plan.repeat} repeats of each "
          f"workload on {', '.join(keys)}; {os.cpu_count()} CPUs", flush=True)
    try:
        with ctx.Pool(4, initializer=_warm_worker) as pool:
            runner = Runner(pool, plan, results)
            for key in keys:
                t1 = time.perf_counter()
                run = systems.start(key, parent, plan.file_mib)
                steal = StealWindow()
                try:
                    with steal:
                        _repeats(runner, run, results, plan.repeat)
                    if steal.share is not None:
                        results.steal[key] = 100 * steal.share
                finally:
                    run.stop()
                    # the next system starts on a quiet disk: the journal's work for the files
                    # just removed and any writeback are not left to its fsyncs
                    os.sync()
                _print_system(results, key, time.perf_counter() - t1)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    results.meta["seconds"] = round(time.perf_counter() - t0)
    paths = write_report(results, args.out)
    print(f"\n({results.meta['seconds']} s) wrote {', '.join(paths)}\n")
    with open(paths[0], encoding="utf-8") as f:
        print(f.read())
    return 0


def _repeats(runner: Runner, run: systems.Running, results: Results, repeats: int) -> None:
    """Every repeat of one system. A repeat that fails (a client timing out, say) is noted
    and the next one runs, so one bad moment costs that repeat's figures only; the system is
    given up when a server process died or two repeats in a row failed. One system failing
    never loses the others' figures."""
    failed_in_a_row = 0
    for rep in range(repeats):
        try:
            runner.repeat(run, rep)
            failed_in_a_row = 0
        except Exception as e:
            failed_in_a_row += 1
            results.notes.append(f"{run.key} repeat {rep}: failed: {e!r}")
            print(f"{run.key} repeat {rep}: failed: {e!r}\n{run.log_tail()}", file=sys.stderr)
            if not run.alive() or failed_in_a_row >= 2:
                results.notes.append(f"{run.key}: given up after repeat {rep}")
                return


def _print_system(results: Results, key: str, seconds: float) -> None:
    vals = results.values.get(key, {})
    shown = ", ".join(f"{m} {statistics.median(v):.1f}" for m, v in vals.items())
    print(f"  {key} ({seconds:.0f} s): {shown}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

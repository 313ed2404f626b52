"""Scaling across broker groups: one group alone against two groups loaded together, on the
same processes, in one run.

    python -m tests.perf.bench_groups [--quick] [--json out.json] [--rounds N]
           [--only sync,async] [--producers 4] [--batch 128]

Design (issue 47):
- One `python -m cluster local --groups 2` (real processes: broker-a and broker-b, a master and
  two slaves each, one controller; SYNC_MASTER by default, `async`: --role ASYNC_MASTER) and a
  topic created in both groups (`topic create --groups all`). The one-group figure drives only
  broker-a's queues while broker-b idles; the two-group figure drives every queue of the route.
  One cluster rather than a one-group cluster and a two-group cluster: both figures run on the
  very same processes, files and page cache, so what differs between them is only whether the
  other group is loaded; the idle group's own cost (heartbeats, route fetches) is there in both
  and printed (its master's cores busy while idle).
- Producers follow the route as the official clients do: QueryRoute on one node, one
  connection per group's endpoints (each queue names its group's endpoints), each thread
  round-robins over the route's writable queues (interleaved a0, b0, a1, ...) and sends its
  `send_batch` to the endpoints of the queue's group. (cluster/client's Connection talks to the
  endpoints it was given and uses routes only for queue lists, so the bench does the per-queue
  routing itself.) `--producers` threads (4) per group driven: 4 for broker-a alone, 8 for
  both, so each group sees the same number of sends in flight alone and together, as when
  clients grow with the groups. With the same 4 threads for both, each group of the pair would
  get half the concurrency: smaller replication batches, a higher CPU per message that is not a
  cost of sharing (`--same-threads` measures that variant).
- Rounds alternate the order (alone first, then together first, ...) so the host's drift hits
  both alike; a warm-up of both groups runs first, unmeasured.
- Per figure: total msg/s, each master's CPU µs per message of its own group (CpuWindow on the
  master pids), the slaves' and the controller's CPU, the client's, the send_batch call's p50
  and p99 latency, the CPU the host stole meanwhile and the load average (the machine is
  shared). Targets: two groups' msg/s >= 0.9x one group's (on this 2-core machine two groups
  cannot be twice as fast: every process shares the same cores), and each master's CPU per
  message within 10% of broker-a's alone (a group costs the same per message, alone or not).
  The model in docs/performance/benchmarks.md ("Scaling across broker groups") is built from
  these figures.

Not a test: nothing asserts on time.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import grpc

from cluster.admin.admin_token import read_token_file
from cluster.client import ClientError, Message, Producer
from cluster.client.admin_client import AdminClient
from cluster.client.producer import NO_RETRY
from common.text_output import format_table
from proto.apache.rocketmq.v2 import definition_pb2 as d
from tests.integration.harness import LocalCluster, cluster_cli
from tests.support.waiting import wait_until

from . import messaging_load as load
from .bench_store import REPO_ROOT, Context, fmt_value, percentile, save_and_compare, to_json
from .host_load import CpuWindow, StealWindow

TOPIC = "BenchGroups"
QUEUES = 8  # per group
GROUPS = ("broker-a", "broker-b")
SCENARIOS = {"sync": ("SYNC_MASTER", "SYNC_MASTER + 2 slaves per group"),
             "async": ("ASYNC_MASTER", "ASYNC_MASTER + 2 slaves per group")}
THROUGHPUT_TARGET = 0.9  # two groups' total msg/s against one group's
CPU_TOLERANCE = 0.10  # each master's CPU per message against broker-a's alone


@dataclass(frozen=True)
class Plan:
    seconds: float  # each measured window
    rounds: int  # pairs of (alone, together)
    producers: int  # threads per group driven (same_threads: in all)
    batch: int
    same_threads: bool = False


QUICK = dict(seconds=3.0, rounds=2)
FULL = dict(seconds=8.0, rounds=3)


@dataclass
class Route:
    """The topic's writable queues in the route's order, as (group, endpoints) per queue."""
    queues: list[tuple[str, str]]

    def only(self, group: str) -> "Route":
        return Route([q for q in self.queues if q[0] == group])

    @property
    def endpoints(self) -> dict[str, str]:
        return dict(self.queues)


@dataclass
class Run:
    """One measured window."""
    rate: float
    per_group: dict[str, int]
    cpu: dict[str, float]  # CPU seconds per process name
    wall: float
    latencies_ms: list[float]
    errors: int
    first_error: str
    steal: float | None
    loadavg: float
    pids: dict[str, int] = field(default_factory=dict)
    idle: dict[str, float] = field(default_factory=dict)  # cores busy with no load (idle_cores)

    def cpu_us(self, name: str, group: str) -> float:
        return self.cpu[name] / max(self.per_group.get(group, 0), 1) * 1e6

    def net_us(self, name: str, group: str) -> float:
        """CPU per message beyond what the process burns with no load (its timers, heartbeats,
        metrics) over the same wall time: what a message adds."""
        spent = self.cpu[name] - self.idle.get(name, 0.0) * self.wall
        return spent / max(self.per_group.get(group, 0), 1) * 1e6

    def busy(self, name: str) -> float:
        return self.cpu[name] / self.wall


class Cluster:
    """A running `cluster local --groups 2`: its processes by role, the route of TOPIC."""

    def __init__(self, root: str, role: str) -> None:
        self.root = root
        self.lc = LocalCluster(root, "--role", role, groups=2)

    def start(self) -> "Cluster":
        self.lc.wait_for("Ctrl-C stops everything cleanly", 180)
        self.info = self.lc.info()
        self.token = read_token_file(self.info["token_file"])
        r = cluster_cli("topic", "create", TOPIC, "--queues", str(QUEUES), "--groups", "all",
                        "--cluster-dir", self.root)
        if r.returncode != 0:
            raise RuntimeError(f"topic create: {r.stdout}{r.stderr}")
        self.pids = self._pids()
        return self

    def _pids(self) -> dict[str, int]:
        """{"broker-a master": pid, "broker-a slaves": [..], ..., "controller": pid} flattened:
        '<group> master', '<group> slave<i>', 'controller'."""
        out: dict[str, int] = {}
        for group in GROUPS:
            slaves = 0
            for node in self.info["nodes"]:
                if node["group"] != group:
                    continue
                if self._role(node["address"]).endswith("MASTER"):
                    out[f"{group} master"] = node["pid"]
                else:
                    slaves += 1
                    out[f"{group} slave{slaves}"] = node["pid"]
            if f"{group} master" not in out:
                raise RuntimeError(f"{group}: no master")
        out["controller"] = self.info["controller"]["pid"]
        return out

    def _role(self, address: str) -> str:
        with AdminClient(address, self.token, timeout=5) as admin:
            try:
                return admin.status().role
            except grpc.RpcError:
                return ""

    def route(self) -> Route:
        """The route of TOPIC once it lists both groups' queues (the masters register their
        topics at their next heartbeat)."""
        entry = self.info["nodes"][0]["address"]
        found: list[Route] = []

        def both() -> bool:
            with load.connect(entry) as conn:
                queues = [q for q in conn.route(TOPIC, refresh=True)
                          if q.broker.id == 0 and q.permission in (d.WRITE, d.READ_WRITE)]
            found[:] = [Route([(q.broker.name, ";".join(
                sorted(f"{a.host}:{a.port}" for a in q.broker.endpoints.addresses)))
                for q in queues])]
            return {g for g, _ in found[0].queues} == set(GROUPS)

        wait_until(both, timeout=30, what=f"{TOPIC}'s route lists both groups")
        return found[0]

    def close(self) -> None:
        self.lc.kill_all()


def drive(route: Route, plan: Plan, pids: dict[str, int], warmup: float = 0.5) -> Run:
    """`plan.producers` threads per group of the route (plan.same_threads: in all), each
    round-robining over the route's queues (starting at its own index) and sending
    send_batch(plan.batch) to the queue's group; the window of `plan.seconds` after `warmup` is
    measured: messages per group, CPU of `pids` and of this process, every call's latency that
    ended in it."""
    conns = {g: load.connect(ep) for g, ep in route.endpoints.items()}
    stop, lock = threading.Event(), threading.Lock()
    window = [float("inf"), float("inf")]  # measured [start, end) in perf_counter time
    counts = {g: 0 for g in conns}
    latencies: list[float] = []
    errors: list[Exception] = []

    def run(t: int) -> None:
        producers = {g: Producer(c, retry=NO_RETRY) for g, c in conns.items()}
        i, n = t, 0
        while not stop.is_set():
            group = route.queues[i % len(route.queues)][0]
            i += 1
            msgs = [Message(TOPIC, load.BODY, tag="bench", keys=f"g{t}-{n + k}")
                    for k in range(plan.batch)]
            n += plan.batch
            t0 = time.perf_counter()
            try:
                producers[group].send_batch(msgs)
            except ClientError as e:
                errors.append(e)
                continue
            t1 = time.perf_counter()
            if window[0] <= t1 < window[1]:
                with lock:
                    counts[group] += plan.batch
                    latencies.append((t1 - t0) * 1000)

    try:
        for c in conns.values():  # connect before the clock
            Producer(c).send(Message(TOPIC, load.BODY))
        threads = plan.producers * (1 if plan.same_threads else len(conns))
        workers = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(threads)]
        for w in workers:
            w.start()
        time.sleep(warmup)
        cpu = CpuWindow({**pids, "client": os.getpid()})
        with StealWindow() as steal, cpu:
            window[0] = time.perf_counter()
            time.sleep(plan.seconds)
            window[1] = time.perf_counter()
        loadavg = os.getloadavg()[0]
        stop.set()
        for w in workers:
            w.join(60)
    finally:
        for c in conns.values():
            c.close()
    per_group = {g: counts.get(g, 0) for g in GROUPS}
    return Run(sum(per_group.values()) / cpu.wall, per_group, cpu.used, cpu.wall, latencies,
               len(errors), str(errors[0]) if errors else "", steal.share, loadavg, pids)


def idle_cores(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Cores each process keeps busy with no load at all (a window of `seconds`)."""
    with CpuWindow(pids) as cpu:
        time.sleep(seconds)
    return {name: used / cpu.wall for name, used in cpu.used.items()}


def bench_scenario(ctx: Context, scenario: str, plan: Plan) -> None:
    role, title = SCENARIOS[scenario]
    per = "in all" if plan.same_threads else "per group"
    print(f"\n{title}: send_batch({plan.batch}) x {plan.producers} threads {per}, broker-a alone "
          f"(broker-b idle) / both groups, {plan.rounds} rounds of {plan.seconds:.0f} s each",
          flush=True)
    root = ctx.tmpdir(scenario)
    cluster = Cluster(os.path.join(root, "cluster"), role)
    try:
        cluster.start()
        route = cluster.route()
        alone = route.only("broker-a")
        pids = cluster.pids
        drive(route, plan, pids)  # warm-up, not measured: fresh files and caches
        runs: dict[str, list[Run]] = {"alone": [], "together": []}
        for r in range(plan.rounds):
            idle = idle_cores(pids, min(3.0, plan.seconds))
            for kind in (("alone", "together") if r % 2 == 0 else ("together", "alone")):
                run = drive(alone if kind == "alone" else route, plan, pids)
                run.idle = idle
                runs[kind].append(run)
                print_run(r + 1, kind, run)
    except BaseException:
        print("".join(cluster.lc.output[-40:]), file=sys.stderr)
        raise
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
    report(ctx, scenario, runs)


def print_run(r: int, kind: str, run: Run) -> None:
    per = ", ".join(f"{g} {run.per_group[g] / run.wall:,.0f} msg/s "
                    f"{run.cpu_us(f'{g} master', g):.1f} µs/msg" if run.per_group[g] else
                    f"{g} idle ({run.busy(f'{g} master'):.2f} cores)" for g in GROUPS)
    steal = "-" if run.steal is None else f"{100 * run.steal:.1f}%"
    err = f"; {run.errors} errors, first: {run.first_error}" if run.errors else ""
    print(f"  round {r} {kind:8s}: {run.rate:,.0f} msg/s ({per}); p99 "
          f"{percentile(run.latencies_ms, 99):.1f} ms; steal {steal}, load {run.loadavg:.1f}"
          f"{err}", flush=True)


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else float("nan")


def report(ctx: Context, scenario: str, runs: dict[str, list[Run]]) -> None:
    """The means over the rounds, as ctx figures (keys <scenario>_<figure>_<alone|together>,
    ratios <scenario>_<figure>_ratio)."""
    p = f"{scenario}: "
    a, t = runs["alone"], runs["together"]

    def pair(fig: str, label: str, unit: str, of, better_high: bool = True) -> tuple[float, float]:
        va, vt = _mean([of(x) for x in a]), _mean([of(x) for x in t])
        ctx.add(f"{scenario}_{fig}_alone", f"{p}{label}, one group", va, unit,
                higher_is_better=better_high)
        ctx.add(f"{scenario}_{fig}_together", f"{p}{label}, two groups", vt, unit,
                higher_is_better=better_high)
        return va, vt

    ra, rt = pair("rate", "total msg/s", "msg/s", lambda x: x.rate)
    ctx.add(f"{scenario}_rate_ratio", f"{p}  two groups / one group, msg/s", rt / ra, "x",
            THROUGHPUT_TARGET)
    for g in GROUPS:
        ctx.add(f"{scenario}_rate_{g}_together", f"{p}  {g}'s share, two groups",
                _mean([x.per_group[g] / x.wall for x in t]), "msg/s")
    base = _mean([x.cpu_us("broker-a master", "broker-a") for x in a])
    ctx.add(f"{scenario}_cpu_master_alone", f"{p}broker-a master CPU per message, one group",
            base, "us", higher_is_better=False,
            note=f"{_mean([x.busy('broker-a master') for x in a]):.2f} cores busy; broker-b's "
                 f"idle master {_mean([x.busy('broker-b master') for x in a]):.3f} cores")
    for g in GROUPS:
        v = _mean([x.cpu_us(f"{g} master", g) for x in t])
        ctx.add(f"{scenario}_cpu_master_{g}_together", f"{p}{g} master CPU per message, "
                f"two groups", v, "us", higher_is_better=False,
                note=f"{_mean([x.busy(f'{g} master') for x in t]):.2f} cores busy")
        ratio = v / base
        r = ctx.add(f"{scenario}_cpu_master_{g}_ratio", f"{p}  {g} together / broker-a alone",
                    ratio, "x", 1 + CPU_TOLERANCE, higher_is_better=False)
        if ratio < 1 - CPU_TOLERANCE:  # "within 10%": cheaper together is odd too
            r.note = "more than 10% cheaper together: check the window's load"
    base_net = _mean([x.net_us("broker-a master", "broker-a") for x in a])
    ctx.add(f"{scenario}_cpu_master_net_alone", f"{p}broker-a master CPU per message beyond "
            f"idle, one group", base_net, "us", higher_is_better=False,
            note=f"idle, with no load: {_mean([x.idle['broker-a master'] for x in a]):.3f} cores")
    ctx.add(f"{scenario}_idle_master", f"{p}a master's CPU with no load, % of one core",
            100 * _mean([x.idle[f"{g} master"] for x in a for g in GROUPS]), "%",
            higher_is_better=False)
    for g in GROUPS:
        v = _mean([x.net_us(f"{g} master", g) for x in t])
        ctx.add(f"{scenario}_cpu_master_net_{g}_together", f"{p}{g} master CPU per message "
                f"beyond idle, two groups", v, "us", higher_is_better=False)
        ctx.add(f"{scenario}_cpu_master_net_{g}_ratio", f"{p}  {g} together / broker-a alone, "
                f"beyond idle", v / base_net, "x", 1 + CPU_TOLERANCE, higher_is_better=False)
    pair("cpu_slave", "slave CPU per message of its group (mean)", "us",
         lambda x: _mean([x.cpu[k] / max(x.per_group[k.split()[0]], 1) * 1e6
                          for k in x.cpu if " slave" in k and x.per_group[k.split()[0]]]),
         better_high=False)
    pair("cpu_controller_busy", "controller CPU, % of one core", "%",
         lambda x: 100 * x.busy("controller"), better_high=False)
    pair("cpu_controller", "controller CPU per message (all groups)", "us",
         lambda x: x.cpu["controller"] / max(sum(x.per_group.values()), 1) * 1e6,
         better_high=False)
    pair("cpu_client", "client CPU per message", "us",
         lambda x: x.cpu["client"] / max(sum(x.per_group.values()), 1) * 1e6, better_high=False)
    pair("cpu_total", "all processes' CPU per message", "us",
         lambda x: sum(x.cpu.values()) / max(sum(x.per_group.values()), 1) * 1e6,
         better_high=False)
    for q in (50, 99):
        pair(f"latency_p{q}", f"send_batch call p{q}", "ms",
             lambda x, q=q: percentile(x.latencies_ms, q), better_high=False)
    pair("steal", "CPU stolen by the host", "%",
         lambda x: None if x.steal is None else 100 * x.steal, better_high=False)
    pair("loadavg", "load average (1 min) at the window's end", "",
         lambda x: x.loadavg, better_high=False)


def print_side_by_side(ctx: Context, scenarios: list[str]) -> None:
    res = ctx.results
    for scenario in scenarios:
        if f"{scenario}_rate_alone" not in res:
            continue
        get = lambda fig: res.get(f"{scenario}_{fig}")  # noqa: E731

        def row(label: str, unit: str, one: str, two: str, ratio=None) -> None:
            rows.append((label, unit, one, two, _ratio_cell(ratio) if ratio else ""))

        rows: list[tuple] = []
        for fig in ("rate", "cpu_master", "cpu_slave", "cpu_controller", "cpu_controller_busy",
                    "cpu_client", "cpu_total", "latency_p50", "latency_p99", "steal", "loadavg"):
            one, two = get(f"{fig}_alone"), get(f"{fig}_together")
            if fig == "cpu_master":
                net = get("cpu_master_net_alone")
                for g in GROUPS:
                    alone = g == "broker-a"
                    row(f"{g} master CPU per message", "µs",
                        fmt_value(one.value, "us") if alone else "(idle)",
                        fmt_value(get(f"cpu_master_{g}_together").value, "us"),
                        get(f"cpu_master_{g}_ratio"))
                    row("  beyond its idle CPU", "µs", fmt_value(net.value, "us") if alone
                        else "(idle)", fmt_value(get(f"cpu_master_net_{g}_together").value, "us"),
                        get(f"cpu_master_net_{g}_ratio"))
                row("a master's CPU with no load", "% core", fmt_value(get("idle_master").value,
                                                                     "%"), "", None)
                continue
            label = one.label.partition(": ")[2].rsplit(", one group", 1)[0]
            unit = {"us": "µs"}.get(one.unit, one.unit)
            row(label, unit, fmt_value(one.value, one.unit), fmt_value(two.value, two.unit),
                get(f"{fig}_ratio"))
            if fig == "rate":
                for g in GROUPS:
                    row(f"  {g}'s share", "msg/s",
                        fmt_value(one.value, "msg/s") if g == "broker-a" else "idle",
                        fmt_value(get(f"rate_{g}_together").value, "msg/s"))
        print(f"\n{SCENARIOS[scenario][1]} (means over the rounds):")
        print("\n".join(format_table(("figure", "unit", "one group (a; b idle)", "two groups",
                                      "two / one (target)"), rows, right={2, 3}, rule=True)))
    notes = [r for r in res.values() if r.note]
    if notes:
        print("\nnotes:")
        for r in notes:
            print(f"  {r.key}: {r.note}")


def _ratio_cell(r) -> str:
    sign = "≥" if r.higher_is_better else "<"
    return f"{r.value:.3f} {r.status} ({sign} {r.target:g})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.perf.bench_groups",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 s windows, 2 rounds (~2 min)")
    p.add_argument("--rounds", type=int, help="pairs of (one group, two groups) windows")
    p.add_argument("--only", default="sync", help="subset of sync,async (default sync)")
    p.add_argument("--producers", type=int, default=4, help="producer threads per group driven")
    p.add_argument("--same-threads", action="store_true",
                   help="--producers threads in all for both figures (each group of the pair "
                        "gets half the concurrency)")
    p.add_argument("--batch", type=int, default=128, help="messages per send_batch")
    p.add_argument("--seconds", type=float, help="each measured window")
    p.add_argument("--json", metavar="OUT")
    args = p.parse_args(argv)
    selected = [x.strip() for x in args.only.split(",") if x.strip()]
    if not selected or any(x not in SCENARIOS for x in selected):
        p.error("--only takes sync, async")
    sizes = {**(QUICK if args.quick else FULL)}
    if args.rounds:
        sizes["rounds"] = args.rounds
    if args.seconds:
        sizes["seconds"] = args.seconds
    plan = Plan(producers=args.producers, batch=args.batch, same_threads=args.same_threads,
                **sizes)
    logging.basicConfig(level=logging.WARNING)
    root = tempfile.mkdtemp(prefix=".bench-groups-", dir=os.path.join(REPO_ROOT, "tests", "perf"))
    ctx = Context(plan, root, False, 0)  # type: ignore[arg-type]  (any dataclass of sizes)
    print(f"bench_groups: {'quick' if args.quick else 'full'} run of {', '.join(selected)}; "
          f"{plan.producers} threads {'in all' if plan.same_threads else 'per group'}, "
          f"batches of {plan.batch}, 1 KiB bodies; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at the start",
          flush=True)
    t0 = time.perf_counter()
    try:
        for scenario in selected:
            bench_scenario(ctx, scenario, plan)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - t0
    print_side_by_side(ctx, selected)
    print(f"\n({elapsed:.0f}s)")
    args.profile, args.switch_interval = False, None
    save_and_compare(to_json(ctx, args, elapsed), args.json, None, "")
    return 0


if __name__ == "__main__":
    sys.exit(main())

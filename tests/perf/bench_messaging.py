"""Messaging benchmarks: the RocketMQ 5 gRPC API of real node processes on 127.0.0.1, with our
client library (cluster/client) and the official Python client, next to a bare gRPC service.

    python -m tests.perf.bench_messaging [--quick] [--json out.json] [--compare old.json]
           [--only async,sync] [--producers 4] [--batch 128] [--py-spy DIR]

Scenarios (tests/integration/harness node processes, default store settings, ASYNC_FLUSH):
  async  an ASYNC_MASTER alone
  sync   a SYNC_MASTER with two slaves (a put answers once a slave acked it)
Figures per scenario:
  send_batch     msg/s, `--producers` threads calling Producer.send_batch(`--batch`) on one
                 connection (target for sync: >= 30,000 msg/s)
  send_async     msg/s, the same threads calling BatchingProducer.submit (key kept for --compare)
  latency p50/p99  ms of sequential single-message Producer.send (target p99 < 5 ms)
  end-to-end     ms from send to receive, one producer process at 1,000 msg/s and one
                 consumer receiving up to 32 and acking each answer (end_to_end_load.py), and
                 where a message waits (stored -> received, the wait for the receive)
  receive/ack    msg/s, SimpleConsumer threads: receive(32) + one AckMessage per batch (in one
                 response, ReceiveMessages), the same with each batch acked by the next
                 receive (AckAndReceive), and over the v2 ReceiveMessage stream; then the
                 same with `--batch` messages per receive; each with its ratio to
                 send_batch of the same scenario in the same run (target: >= 0.8x) and the
                 CPU per consumed message of the master and of the client process
  official       msg/s of the official Python client's sequential sends (subprocess)
With --window-rounds N, instead: send_batch with the duplicate window (store/dedup/) on and off
in turns on one group per scenario (duplicateWindowSeconds set at runtime on every node: 120,
then 0; the first of each pair alternates), N pairs, each pair's msg/s and master CPU per
message side by side with their ratio (target: on >= 0.95x off). --window-max-entries sets the
bound of the runs with the window on: small, the window is full (every put evicts) as it is
after its first two minutes; by default it starts empty in each run and grows.
Baselines in the same run: the bare service (gRPC + protobuf, no store, on the node's asyncio
serving layer) answering the same
send_batch load and the same receive + ack load (the ceiling of the per-message server stream
of ReceiveMessage: its own receive/send ratio, and its CPU per consumed message next to the
node's), and sequential raw unary calls to it (calls/s, p50/p99). Each scenario and the
baseline also print the share of CPU the host stole meanwhile (tests/perf/host_load.py).

Not a test: nothing asserts on time. The machine is shared and noisy; compare figures measured
side by side in one run, and runs with --compare (see docs/performance/benchmarks.md).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterator

from cluster.client import BatchingConfig
from common.text_output import format_table
from tests.integration.harness import Group, NodeProcess, free_port, in_sync, wait_until

from . import messaging_load as load
from tests.support.processes import index_process_pid

from .end_to_end_load import end_to_end
from .host_load import CpuWindow, StealWindow
from .bench_store import (REPO_ROOT, Context, fmt_value, load_json, percentile,
                          save_and_compare, to_json)

SCENARIOS = {"async": ("ASYNC_MASTER", 0, "ASYNC_MASTER alone"),
             "sync": ("SYNC_MASTER", 2, "SYNC_MASTER + 2 slaves")}
PY_SPY = os.path.join(os.path.dirname(sys.executable), "py-spy")


@dataclass(frozen=True)
class Plan:
    seconds: float  # each throughput figure
    latency_samples: int
    receive_messages: int
    official_messages: int
    e2e_messages: int  # stamped messages of the end-to-end figure, at E2E_RATE
    producers: int
    batch: int
    file_mib: int  # commitlog file size of the nodes
    props: tuple[tuple[str, str], ...] = ()  # broker.conf keys of every node (--set)

    def __post_init__(self) -> None:
        if self.producers < 1 or self.batch < 1 or self.seconds <= 0:
            raise ValueError("producers, batch and seconds must be positive")


QUICK = dict(seconds=2.0, latency_samples=300, receive_messages=5000, official_messages=200,
             e2e_messages=2000, file_mib=256)
FULL = dict(seconds=6.0, latency_samples=2000, receive_messages=30000, official_messages=1000,
            e2e_messages=6000, file_mib=1024)
E2E_RATE = 1000.0  # msg/s, as the compare's end-to-end workload


def start_group(root: str, scenario: str, plan: Plan) -> tuple[Group, object]:
    role, slaves, _ = SCENARIOS[scenario]
    props = {"mappedFileSizeCommitLog": str(plan.file_mib << 20), **dict(plan.props)}
    group = Group(root)
    try:
        master = group.master(role, **props)
        for i in range(slaves):
            group.slave(master, i + 1, **props)
        if slaves:
            wait_until(in_sync(master, slaves), timeout=30, what=f"{slaves} slaves in sync")
    except BaseException:
        group.close()
        raise
    return group, master


def add_rate(ctx: Context, key: str, label: str, rate: load.Rate, target: float | None = None):
    note = rate.first_error and (f"{rate.errors} errors, first: {rate.first_error}"
                                 if rate.errors else rate.first_error)
    return ctx.add(key, label, rate.value, "msg/s", target, note=note)


def add_latency(ctx: Context, key: str, label: str, samples: list[float], target99: float | None):
    ctx.add(f"{key}_p50", f"{label} p50", percentile(samples, 50), "ms", higher_is_better=False)
    ctx.add(f"{key}_p99", f"{label} p99", percentile(samples, 99), "ms", target99,
            higher_is_better=False)


@contextlib.contextmanager
def running_group(root: str, scenario: str, plan: Plan) -> Iterator[tuple[Group, NodeProcess]]:
    """(group, master) of `scenario` in `root`; the nodes' last log lines printed when the body
    fails; the group closed and `root` removed afterwards."""
    group, master = start_group(root, scenario, plan)
    try:
        yield group, master
    except BaseException:
        print(group.logs(20), file=sys.stderr)
        raise
    finally:
        group.close()
        shutil.rmtree(root, ignore_errors=True)


def bench_scenario(ctx: Context, scenario: str, plan: Plan, py_spy_dir: str | None) -> None:
    _, _, title = SCENARIOS[scenario]
    print(f"\n{title}:", flush=True)
    try:
        with running_group(ctx.tmpdir(scenario), scenario, plan) as (group, master):
            with StealWindow() as steal:
                scenario_figures(ctx, scenario, plan, group, master, py_spy_dir)
            add_steal(ctx, scenario, steal)
    finally:
        for key, r in ctx.results.items():  # "sync: ..." in --json and --compare output
            if key.startswith(f"{scenario}_") and not r.label.startswith(f"{scenario}: "):
                r.label = f"{scenario}: {r.label}"


def scenario_figures(ctx: Context, scenario: str, plan: Plan, group: Group, master: NodeProcess,
                     py_spy_dir: str | None) -> None:
    addr = master.address
    probe = NodeProbe([n.pid for n in group.nodes], plan.seconds, py_spy_dir, scenario)
    rate = load.batched_send_rate(addr, "BenchBatch", plan.producers, plan.batch,
                                  plan.seconds, probe=probe)
    add_rate(ctx, f"{scenario}_send_batch", f"send_batch({plan.batch}) x {plan.producers} "
             f"threads", rate, 30_000 if scenario == "sync" else None)
    probe.report(ctx, scenario)
    config = BatchingConfig(max_messages=plan.batch, max_in_flight=plan.producers)
    rate = load.batching_producer_rate(addr, "BenchAsync", plan.producers, plan.seconds, config)
    add_rate(ctx, f"{scenario}_send_async", f"BatchingProducer x {plan.producers} threads", rate)
    add_latency(ctx, f"{scenario}_latency", "single send latency",
                load.send_latencies(addr, "BenchLatency", plan.latency_samples), 5.0)
    add_end_to_end(ctx, scenario, addr, plan)
    produced = ctx.results[f"{scenario}_send_batch"].value
    for batch in sorted({32, plan.batch}):
        if not bench_receive_ack(ctx, scenario, plan, addr, batch, produced, master.pid):
            break
    out = load.official_send(addr, "BenchOfficial", plan.official_messages)
    if "error" in out:
        print(f"  official client: failed: {out['error']}")
    else:
        note = f"client {out['client_version']}" + (
            f"; {out['errors']} errors, first: {out['first_error']}" if out["errors"] else "")
        ctx.add(f"{scenario}_official", "official client, sequential send",
                out["sent"] / out["seconds"], "msg/s", note=note)
        add_latency(ctx, f"{scenario}_official_latency", "official client send latency",
                    out["latencies_ms"], None)


def add_end_to_end(ctx: Context, scenario: str, addr: str, plan: Plan) -> None:
    """One producer at E2E_RATE, one consumer receiving up to 32 and acking each answer
    (end_to_end_load.py): send-to-receive p50/p99, and where a message waits."""
    e2e = end_to_end(addr, "BenchE2E", plan.e2e_messages, E2E_RATE)
    label = f"end-to-end latency at {E2E_RATE:,.0f} msg/s"
    add_latency(ctx, f"{scenario}_e2e", label, e2e.latency_ms, None)
    before = len(e2e.waited_for_receive_ms) / max(1, e2e.messages)
    ctx.add(f"{scenario}_e2e_stored", "  stored -> received p50",
            percentile(e2e.stored_to_received_ms, 50), "ms", higher_is_better=False,
            note=f"sent -> stored p50 {percentile(e2e.sent_to_stored_ms, 50):.2f} ms; "
                 f"{100 * before:.0f}% stored before the receive that took them began, "
                 f"which they waited for {percentile(e2e.waited_for_receive_ms, 50):.2f} ms "
                 f"(p50); receive p50 {percentile(e2e.receive_ms, 50):.2f} ms with "
                 f"{e2e.per_receive:.1f} messages on average")


# how a consumer receives and acks (messaging_load.RECEIVE_FORMS): form -> (key suffix, label)
RECEIVE_FORMS = {"one": ("", ""), "next": ("_next", ", acked by the next receive"),
                 "stream": ("_stream", ", v2 stream")}


def bench_receive_ack(ctx: Context, scenario: str, plan: Plan, addr: str, batch: int,
                      produced: float, master_pid: int) -> bool:
    """receive(batch) + one AckMessage per batch, next to the produce rate of the same scenario
    measured just before (send_batch): the consume path must keep up with producers (target:
    at least 0.8x). In each form of RECEIVE_FORMS, each on a backlog of its own: answered in
    one response (ReceiveMessages) and acked by its own AckMessage, the same with each batch
    acked by the next receive (AckAndReceive: what our client can do), and over the v2 stream
    (what the official clients use). False when the server does not implement ReceiveMessage."""
    for form, (suffix, label) in RECEIVE_FORMS.items():
        topic = f"BenchReceive{batch}{suffix}"
        load.fill(addr, topic, plan.receive_messages)
        with CpuWindow({"server": master_pid, "client": os.getpid()}) as cpu:
            rate = load.receive_ack_rate(addr, topic, plan.receive_messages,
                                         threads=plan.producers, batch=batch,
                                         limit_s=plan.seconds * 3, form=form)
        if rate is None:
            print("  receive/ack: skipped, the server answers ReceiveMessage with NOT_IMPLEMENTED")
            return False
        key = f"{scenario}_receive_ack" + ("" if batch == 32 else f"_{batch}") + suffix
        add_rate(ctx, key, f"receive({batch}) + ack{label} x {plan.producers} threads", rate)
        ctx.add(f"{key}_ratio", f"  receive({batch}) + ack{label} / send_batch({plan.batch})",
                rate.value / max(produced, 1e-9), "x", 0.8)
        add_receive_cpu(ctx, key, "master", cpu, rate)
    return True


def add_receive_cpu(ctx: Context, key: str, server: str, cpu: CpuWindow,
                    rate: load.Rate) -> None:
    """CPU per consumed message of the server process and of this (client) process over the
    whole receive + ack run: the node's figure next to the bare service's is what the node's
    own work adds to gRPC's per-message stream, the floor of both."""
    per = cpu.per_message(rate.count)
    ctx.add(f"{key}_cpu_server", f"  {server} CPU per message (receive + ack)", per["server"],
            "us", higher_is_better=False)
    ctx.add(f"{key}_cpu_client", "  client CPU per message (receive + ack)", per["client"],
            "us", higher_is_better=False)


def add_steal(ctx: Context, key: str, steal: StealWindow, label: str = "") -> None:
    """The host's share of the CPU (steal) during a section: figures of a section with high
    steal are lower for reasons outside this machine (tests/perf/host_load.py)."""
    if steal.share is not None:
        ctx.add(f"{key}_steal", f"{label}CPU stolen by the host during these figures",
                100 * steal.share, "%", higher_is_better=False)


def bench_baseline(ctx: Context, plan: Plan) -> None:
    print("\nbaseline, bare gRPC MessagingService (no store) in its own process:", flush=True)
    server = load.BareServer(free_port())
    try:
        with StealWindow() as steal:
            produced = load.batched_send_rate(server.address, "Bare", plan.producers,
                                              plan.batch, plan.seconds)
            add_rate(ctx, "bare_send_batch", f"bare: send_batch({plan.batch}) x "
                     f"{plan.producers} threads", produced)
            for batch in sorted({32, plan.batch}):
                for form, (suffix, label) in RECEIVE_FORMS.items():
                    key = f"bare_receive_ack{'' if batch == 32 else f'_{batch}'}{suffix}"
                    with CpuWindow({"server": server.proc.pid, "client": os.getpid()}) as cpu:
                        rate = load.receive_ack_rate(
                            server.address, "Bare", plan.receive_messages, threads=plan.producers,
                            batch=batch, limit_s=plan.seconds * 3, form=form)
                    add_rate(ctx, key, f"bare: receive({batch}) + ack{label} x {plan.producers} "
                             f"threads", rate)
                    # the ceiling of the consume target in this form: no store at all
                    ctx.add(f"{key}_ratio", f"bare:   receive({batch}) + ack{label} / "
                            f"send_batch({plan.batch})", rate.value / max(produced.value, 1e-9),
                            "x")
                    add_receive_cpu(ctx, key, "bare server", cpu, rate)
        add_steal(ctx, "bare", steal, "bare: ")
        samples = load.bare_unary(server.address, plan.latency_samples)
        ctx.add("bare_unary_rate", "bare: sequential raw unary calls",
                len(samples) / (sum(samples) / 1000), "calls/s")
        add_latency(ctx, "bare_unary", "bare: raw unary call", samples, None)
        bench_stream_threading(ctx, server.address, plan)
    finally:
        server.close()


def bench_stream_threading(ctx: Context, address: str, plan: Plan) -> None:
    """Sequential raw-stub receive(32) streams on a default channel next to one with gRPC's
    SingleThreadedUnaryStream option (what cluster/client's Connection sets), interleaved over
    two rounds so host noise hits both alike: p50 per call and client CPU per message."""
    n = max(50, plan.latency_samples // 3)
    runs: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
    for _ in range(2):
        for single in (False, True):
            samples, cpu_us = load.bare_stream(address, 32, n, single)
            runs[single][0].extend(samples)
            runs[single][1].append(cpu_us)
    for single, (samples, cpus) in runs.items():
        name = "single_threaded" if single else "default"
        label = "single-threaded" if single else "default"
        ctx.add(f"bare_stream32_{name}_p50", f"bare: raw receive(32) stream, {label} channel, "
                "p50", percentile(samples, 50), "ms", higher_is_better=False)
        ctx.add(f"bare_stream32_{name}_client_cpu", f"bare:   client CPU per streamed message, "
                f"{label} channel", sum(cpus) / len(cpus), "us", higher_is_better=False)


WINDOW_TARGET = 0.95  # send_batch with the duplicate window on, against off


def bench_window(ctx: Context, scenario: str, plan: Plan, rounds: int,
                 max_entries: int | None) -> None:
    """send_batch with the duplicate window on and off in turns, `rounds` pairs on one group
    (a runtime config change on every node, so both run on the same processes and files),
    alternating which of a pair goes first: the host's drift hits both alike. Turned on, the
    window starts empty and grows through the run (dict resizes, fresh heap pages) unless
    `max_entries` is small enough for the warm-up to fill it: then every put also evicts, as
    in a full window."""
    _, _, title = SCENARIOS[scenario]
    bound = "" if max_entries is None else f", duplicateWindowMaxEntries={max_entries}"
    print(f"\n{title}: send_batch({plan.batch}) x {plan.producers}, duplicate window on / off"
          f"{bound}", flush=True)
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with running_group(ctx.tmpdir(f"{scenario}-window"), scenario, plan) as (group, master):
        # not measured: a fresh node's first seconds (files, pages, caches) would weigh on
        # whichever setting came first
        load.batched_send_rate(master.address, "BenchWindowWarmup", plan.producers, plan.batch,
                               plan.seconds)
        for r in range(rounds):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                for node in group.nodes:
                    if max_entries is not None:
                        node.admin().update_config("duplicateWindowMaxEntries", str(max_entries))
                    node.admin().update_config("duplicateWindowSeconds", "120" if on else "0")
                cpu = CpuWindow({"master": master.pid})  # the measured window (its .messages)
                rate = load.batched_send_rate(master.address, f"BenchWindow{r}",
                                              plan.producers, plan.batch, plan.seconds,
                                              probe=cpu)
                if rate.errors:
                    print(f"  {rate.errors} errors, first: {rate.first_error}")
                cpu_us = cpu.per_message(max(1, cpu.messages))["master"]
                runs[on].append((rate.value, cpu_us))
                print(f"  round {r + 1} window {'on ' if on else 'off'}: {rate.value:,.0f} msg/s, "
                      f"master {cpu_us:.1f} µs/msg", flush=True)
    rows = []
    for r, ((on, on_cpu), (off, off_cpu)) in enumerate(zip(runs[True], runs[False])):
        rows.append((str(r + 1), f"{on:,.0f}", f"{off:,.0f}", f"{on / max(off, 1e-9):.3f}",
                     f"{on_cpu:.1f}", f"{off_cpu:.1f}"))
    mean = {k: sum(v for v, _ in runs[k]) / len(runs[k]) for k in runs}
    mean_cpu = {k: sum(c for _, c in runs[k]) / len(runs[k]) for k in runs}
    rows.append(("mean", f"{mean[True]:,.0f}", f"{mean[False]:,.0f}",
                 f"{mean[True] / max(mean[False], 1e-9):.3f}", f"{mean_cpu[True]:.1f}",
                 f"{mean_cpu[False]:.1f}"))
    print("\n".join(format_table(("pair", "on msg/s", "off msg/s", "on/off", "on µs/msg",
                                  "off µs/msg"), rows, right={1, 2, 3, 4, 5}, rule=True)))
    p = f"{scenario}: "  # print_side_by_side's and --json's label form
    ctx.add(f"{scenario}_window_on", f"{p}send_batch, duplicate window on ({rounds} runs)",
            mean[True], "msg/s")
    ctx.add(f"{scenario}_window_off", f"{p}send_batch, duplicate window off ({rounds} runs)",
            mean[False], "msg/s")
    ctx.add(f"{scenario}_window_ratio", f"{p}  window on / off",
            mean[True] / max(mean[False], 1e-9), "x", WINDOW_TARGET)
    ctx.add(f"{scenario}_window_cpu_on", f"{p}  master CPU per message, window on",
            mean_cpu[True], "us", higher_is_better=False)
    ctx.add(f"{scenario}_window_cpu_off", f"{p}  master CPU per message, window off",
            mean_cpu[False], "us", higher_is_better=False)


class NodeProbe:
    """CPU time of every node process and of this (client) process over one measured window,
    per message; optionally py-spy on the master (--gil: samples of the thread holding the
    GIL, i.e. where its Python time goes)."""

    def __init__(self, pids: list[int], seconds: float, py_spy_dir: str | None,
                 scenario: str) -> None:
        self.master_pid = pids[0]
        index = index_process_pid(pids[0])
        self.window = CpuWindow({**{f"node{i}": pid for i, pid in enumerate(pids)},
                                 **({"index": index} if index is not None else {}),
                                 "client": os.getpid()})
        self.seconds = max(1, int(seconds))
        self.out = os.path.join(py_spy_dir, f"{scenario}-master.txt") if py_spy_dir else None
        self.spy: subprocess.Popen | None = None
        self.messages = 0

    def __enter__(self) -> "NodeProbe":
        if self.out:
            self.spy = subprocess.Popen(
                [PY_SPY, "record", "-p", str(self.master_pid), "-f", "raw", "--gil",
                 "-r", "500", "-d", str(self.seconds), "-o", self.out], stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE)
        self.window.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.window.__exit__(*exc)

    def report(self, ctx: Context, scenario: str) -> None:
        n = max(self.messages, 1)
        used, wall = dict(self.window.used), self.window.wall
        master, client = used.pop("node0"), used.pop("client")
        index = used.pop("index", None)
        slaves = list(used.values())  # node1, node2, ...
        ctx.add(f"{scenario}_cpu_master", "  master CPU per message (send_batch)",
                master / n * 1e6, "us", higher_is_better=False,
                note=f"{master / wall:.2f} cores busy")
        if index is not None:
            ctx.add(f"{scenario}_cpu_master_index", "  master's index process CPU per message",
                    index / n * 1e6, "us", higher_is_better=False,
                    note=f"{index / wall:.2f} cores busy")
        if slaves:
            ctx.add(f"{scenario}_cpu_slave", "  CPU per message, each slave (mean)",
                    sum(slaves) / len(slaves) / n * 1e6, "us", higher_is_better=False,
                    note=f"{sum(slaves) / wall:.2f} cores busy (all slaves)")
        ctx.add(f"{scenario}_cpu_client", "  client CPU per message (send_batch)",
                client / n * 1e6, "us", higher_is_better=False,
                note=f"{client / wall:.2f} cores busy")
        if self.spy is not None:
            _, err = self.spy.communicate(timeout=self.seconds + 60)
            if self.spy.returncode != 0 or not os.path.exists(self.out):
                print(f"  py-spy failed: {err.decode(errors='replace')[-300:]}")
            else:
                print_hot_spots(self.out)


def print_hot_spots(path: str, top: int = 15) -> None:
    """Self and inclusive sample shares per function of a py-spy raw (collapsed) profile."""
    own, incl, total = Counter(), Counter(), 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not n.isdigit():
                continue
            frames = [_function(fr) for fr in stack.split(";") if fr]
            total += int(n)
            if frames:
                own[frames[-1]] += int(n)
            for fr in set(frames):
                incl[fr] += int(n)
    print(f"  py-spy {path}: {total} samples holding the GIL; top by self / inclusive:")
    for fr, n in own.most_common(top):
        print(f"    self {100 * n / total:5.1f}%  incl {100 * incl[fr] / total:5.1f}%  {fr}")


def _function(frame: str) -> str:
    """'put (store/commitlog/commitlog.py:120)' -> 'put (store/commitlog/commitlog.py)'."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rpartition(':')[0] or where.rstrip(')')})"


def print_side_by_side(ctx: Context) -> None:
    rows = [("figure", "unit", SCENARIOS["async"][2], SCENARIOS["sync"][2], "target")]
    seen = []
    for key, r in ctx.results.items():
        for prefix in ("async_", "sync_"):
            if key.startswith(prefix) and key[len(prefix):] not in seen:
                seen.append(key[len(prefix):])
    for fig in seen:
        a, sy = ctx.results.get(f"async_{fig}"), ctx.results.get(f"sync_{fig}")
        r = a or sy
        cell = lambda x: "-" if x is None else f"{fmt_value(x.value, x.unit)}" + (  # noqa: E731
            f" {x.status}" if x.target is not None else "")
        targets = {x.target for x in (a, sy) if x is not None and x.target is not None}
        target = " / ".join(("≥ " if r.higher_is_better else "< ") + fmt_value(t, r.unit)
                            for t in sorted(targets)) or "-"
        if sy is not None and sy.target is not None and (a is None or a.target is None):
            target += " (sync)"
        rows.append((r.label.partition(": ")[2], r.unit, cell(a), cell(sy), target))
    for key, r in ctx.results.items():
        if key.startswith("bare_"):
            rows.append((r.label, r.unit, fmt_value(r.value, r.unit), "", "(baseline)"))
    print()
    print("\n".join(format_table(rows[0], rows[1:], right={2, 3}, rule=True)))
    notes = [r for r in ctx.results.values() if r.note]
    if notes:
        print("\nnotes:")
        for r in notes:
            print(f"  {r.key}: {r.note}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.perf.bench_messaging",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 s per rate, fewer samples (~1-2 min)")
    p.add_argument("--only", default="baseline,async,sync", help="subset of baseline,async,sync")
    p.add_argument("--producers", type=int, default=4, help="producer/consumer threads")
    p.add_argument("--batch", type=int, default=128, help="messages per send_batch / request")
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--compare", metavar="OLD", help="print OLD.json next to this run")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="a broker.conf key for every node (repeatable), e.g. "
                        "messageIndexProcessEnable=false")
    p.add_argument("--py-spy", metavar="DIR", help="record the master with py-spy during "
                   "send_batch and print its hot spots (raw profiles kept in DIR)")
    p.add_argument("--window-rounds", metavar="N", type=int, default=0,
                   help="only send_batch with the duplicate window on and off in turns, N "
                        "pairs per selected scenario (baseline skipped)")
    p.add_argument("--window-max-entries", metavar="N", type=int, default=None,
                   help="with --window-rounds: duplicateWindowMaxEntries of the runs with the "
                        "window on (small: the window is full and evicts on every put)")
    args = p.parse_args(argv)
    old = load_json(args.compare) if args.compare else None
    selected = [x.strip() for x in args.only.split(",") if x.strip()]
    if any(x not in ("baseline", *SCENARIOS) for x in selected):
        p.error("--only takes baseline, async, sync")
    props = tuple(tuple(x.split("=", 1)) for x in args.set)
    if any(len(kv) != 2 or not kv[0].strip() for kv in props):
        p.error("--set takes KEY=VALUE")
    plan = Plan(producers=args.producers, batch=args.batch, props=props,
                **(QUICK if args.quick else FULL))
    if args.py_spy:
        os.makedirs(args.py_spy, exist_ok=True)
    logging.basicConfig(level=logging.WARNING)
    root = tempfile.mkdtemp(prefix=".bench-msg-", dir=os.path.join(REPO_ROOT, "tests", "perf"))
    ctx = Context(plan, root, False, 0)  # type: ignore[arg-type]  (any dataclass of sizes)
    print(f"bench_messaging: {'quick' if args.quick else 'full'} run of {', '.join(selected)}; "
          f"{plan.producers} threads, batches of {plan.batch}, 1 KiB bodies; "
          f"{os.cpu_count()} CPUs", flush=True)
    t0 = time.perf_counter()
    try:
        if args.window_rounds > 0:
            for scenario in SCENARIOS:
                if scenario in selected:
                    bench_window(ctx, scenario, plan, args.window_rounds,
                                 args.window_max_entries)
        else:
            if "baseline" in selected:
                bench_baseline(ctx, plan)
            for scenario in SCENARIOS:
                if scenario in selected:
                    bench_scenario(ctx, scenario, plan, args.py_spy)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - t0
    print_side_by_side(ctx)
    print(f"\n({elapsed:.0f}s)")
    args.profile, args.switch_interval = False, None
    save_and_compare(to_json(ctx, args, elapsed), args.json, old, args.compare)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The pure part of tests/perf/compare.py: figures over repeats -> medians, min-max, ratios
ours/peer, and the report files (markdown, JSON, PNG chart). Nothing here starts a server, so
tests/perf_harness/test_compare_report.py checks it with fixed figures.

A figure is one number of one workload against one system in one repeat, e.g.
("ours-async", "produce_x4", "msg/s") -> [15500.0, 16100.0, 16800.0].
"""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict, dataclass, field

# Per metric: its unit and whether a higher value is better (for the "ours/peer" reading).
METRICS: dict[str, tuple[str, bool]] = {
    "produce_x1": ("msg/s", True),
    "produce_x4": ("msg/s", True),
    "seq_p50": ("ms", False),
    "seq_p99": ("ms", False),
    "seq_p999": ("ms", False),
    "consume": ("msg/s", True),
    "consume_ahead": ("msg/s", True),
    "e2e_p50": ("ms", False),
    "e2e_p99": ("ms", False),
}
LABELS = {
    "produce_x1": "batched produce, 1 producer",
    "produce_x4": "batched produce, 4 producers",
    "seq_p50": "sequential produce p50",
    "seq_p99": "sequential produce p99",
    "seq_p999": "sequential produce p99.9",
    "consume": "consume (receive + ack) of a backlog",
    "consume_ahead": "the same, two receives in flight (ours only: ReceiveAhead)",
    "e2e_p50": "produce + consume at a fixed rate, end-to-end p50",
    "e2e_p99": "produce + consume at a fixed rate, end-to-end p99",
}


@dataclass
class SystemInfo:
    """What a system is and how durable its acknowledgement is (stated in the report)."""
    key: str
    title: str
    durability: str
    ours: bool = False
    peer_of: str = ""  # for a peer: the key of our system with the closest durability


@dataclass
class Summary:
    median: float
    low: float
    high: float
    n: int


@dataclass
class Results:
    """Every raw figure of one run: systems in run order, metric values per repeat, the CPU
    seconds per message of every server process, and free-form notes (skips, errors)."""
    systems: list[SystemInfo] = field(default_factory=list)
    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    cpu: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # system -> proc -> µs/msg
    steal: dict[str, float] = field(default_factory=dict)  # system -> % of CPU the host took
    notes: list[str] = field(default_factory=list)
    meta: dict[str, object] = field(default_factory=dict)

    def add(self, system: str, metric: str, value: float) -> None:
        self.values.setdefault(system, {}).setdefault(metric, []).append(float(value))

    def add_cpu(self, system: str, process: str, us_per_msg: float) -> None:
        self.cpu.setdefault(system, {}).setdefault(process, []).append(float(us_per_msg))

    def system(self, key: str) -> SystemInfo:
        return next(s for s in self.systems if s.key == key)


def summarize(values: list[float]) -> Summary | None:
    if not values:
        return None
    return Summary(statistics.median(values), min(values), max(values), len(values))


def ratio(ours: Summary | None, peer: Summary | None) -> float | None:
    """ours/peer of the medians, both measured in the same run (None when one is missing)."""
    if ours is None or peer is None or peer.median == 0:
        return None
    return ours.median / peer.median


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "msg/s":
        return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"
    if unit == "ms":
        return f"{value:.2f}" if value < 10 else f"{value:.1f}"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def fmt_summary(s: Summary | None, unit: str) -> str:
    if s is None:
        return "-"
    if s.n == 1 or fmt(s.low, unit) == fmt(s.high, unit):
        return fmt(s.median, unit)
    return f"{fmt(s.median, unit)} ({fmt(s.low, unit)}-{fmt(s.high, unit)})"


def table(results: Results) -> list[list[str]]:
    """Rows (header first): one per metric, one column per system with median (min-max)."""
    keys = [s.key for s in results.systems]
    rows = [["figure", "unit", *keys]]
    for metric, (unit, _) in METRICS.items():
        cells = [fmt_summary(summarize(results.values.get(k, {}).get(metric, [])), unit)
                 for k in keys]
        if any(c != "-" for c in cells):
            rows.append([LABELS[metric], unit, *cells])
    return rows


def ratio_rows(results: Results) -> list[list[str]]:
    """Rows (header first): ours/peer of the medians for each peer and its closest system of
    ours; for latencies and CPU a ratio above 1 means ours is slower / costlier."""
    present = {s.key for s in results.systems}
    peers = [s for s in results.systems if not s.ours and s.peer_of in present]
    rows = [["figure", *[f"{p.peer_of} / {p.key}" for p in peers]]]
    for metric, (unit, _) in METRICS.items():
        cells = []
        for p in peers:
            ours = summarize(results.values.get(p.peer_of, {}).get(metric, []))
            peer = summarize(results.values.get(p.key, {}).get(metric, []))
            r = ratio(ours, peer)
            cells.append("-" if r is None else f"{r:.2f}")
        if any(c != "-" for c in cells):
            rows.append([LABELS[metric], *cells])
    return rows


def cpu_rows(results: Results) -> list[list[str]]:
    rows = [["system", "server process", "CPU µs per message, produce x4"]]
    for s in results.systems:
        for proc, vals in results.cpu.get(s.key, {}).items():
            rows.append([s.key, proc, fmt_summary(summarize(vals), "µs/msg")])
    return rows


def markdown_table(rows: list[list[str]]) -> str:
    head, *body = rows
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(out)


def render_markdown(results: Results) -> str:
    m = results.meta
    parts = [
        "# Performance versus NATS JetStream and Redis",
        "",
        f"Command: `{m.get('command', 'python -m tests.perf.compare')}`; machine: "
        f"{m.get('cpus', '?')} CPUs, {m.get('platform', '?')}; {m.get('when', '')}; "
        f"repeats: {m.get('repeat', '?')}; 1 KiB bodies; {m.get('plan', '')}.",
        "",
        "Each cell: median over the repeats (min-max). Systems ran one after the other, never "
        "concurrently, on 127.0.0.1, the same message count and body for each; warm-up "
        "messages are not counted. Every client is its own process; clients and servers "
        "share the machine's cores, so a CPU-hungry client (nats-py) lowers its peer's "
        "figures too.",
        "",
        markdown_table(table(results)),
        "",
        "## Ratios ours / peer (medians of this run)",
        "",
        "Throughput: above 1 means ours is faster. Latency and CPU: above 1 means ours is "
        "slower / costlier.",
        "",
        markdown_table(ratio_rows(results)),
        "",
        "## Server CPU per message (psutil cpu_times of each server pid before/after)",
        "",
        markdown_table(cpu_rows(results)),
        "",
        *steal_section(results),
        "## Durability of each system",
        "",
        markdown_table([["system", "what", "acknowledged when"]]
                       + [[s.key, s.title, s.durability] for s in results.systems]),
        "",
        "## Consuming: the calls of each client",
        "",
        CONSUME_CALLS,
    ]
    if results.notes:
        parts += ["", "## Notes", ""] + [f"- {n}" for n in results.notes]
    return "\n".join(parts) + "\n"


CONSUME_CALLS = (
    "Each system's own Python client, one round trip per batch for each. Ours (cluster.client "
    "SimpleConsumer.ack_and_receive): AckAndReceive (proto/batch_receive.proto), which acks "
    "the previous batch, answered, and receives the next in one response; the official "
    "RocketMQ clients use the v2 ReceiveMessage stream, one response per message, and an "
    "AckMessage per batch. NATS (nats-py): fetch, then one ack per message, a publish the "
    "server does not answer. Redis (redis-py): XREADGROUP, then one XACK for the batch, "
    "answered, in its own round trip.")


def steal_section(results: Results) -> list[str]:
    """The host's share of the CPU while each system ran (tests/perf/host_load.py): a system
    measured under more steal had less machine, so its figures are lower for that reason."""
    if not results.steal:
        return []
    rows = [["system", "CPU stolen by the host, % of all CPU time"]]
    rows += [[key, f"{pct:.1f}"] for key, pct in results.steal.items()]
    return ["## CPU stolen by the host while each system ran (/proc/stat steal)", "",
            markdown_table(rows), ""]


def to_json(results: Results) -> dict:
    return {"meta": results.meta, "systems": [asdict(s) for s in results.systems],
            "values": results.values, "cpu_us_per_msg": results.cpu, "notes": results.notes,
            "steal_pct": results.steal,
            "summary": {k: {metric: asdict(summarize(v)) for metric, v in ms.items() if v}
                        for k, ms in results.values.items()}}


def write_chart(results: Results, path: str) -> None:
    """Bars of the throughput medians (with min-max whiskers) and of the latency medians."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [s.key for s in results.systems]
    groups = [["produce_x1", "produce_x4", "consume"], ["seq_p50", "seq_p99", "e2e_p50", "e2e_p99"]]
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    for ax, metrics in zip(axes, groups):
        width = 0.8 / max(len(keys), 1)
        for i, key in enumerate(keys):
            meds, errs = [], [[], []]
            for metric in metrics:
                s = summarize(results.values.get(key, {}).get(metric, []))
                meds.append(s.median if s else 0)
                errs[0].append(s.median - s.low if s else 0)
                errs[1].append(s.high - s.median if s else 0)
            xs = [j + i * width for j in range(len(metrics))]
            ax.bar(xs, meds, width, yerr=errs, label=key, capsize=2)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(metrics))])
        ax.set_xticklabels(metrics, fontsize=8)
        ax.set_ylabel(METRICS[metrics[0]][0])
    axes[0].set_title("throughput (higher is better)")
    axes[1].set_title("latency (lower is better, log scale)")
    axes[1].set_yscale("log")  # sub-millisecond peers next to tens of milliseconds
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(results: Results, out_dir: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, n) for n in ("report.md", "report.json", "chart.png")]
    with open(paths[0], "w", encoding="utf-8") as f:
        f.write(render_markdown(results))
    with open(paths[1], "w", encoding="utf-8") as f:
        json.dump(to_json(results), f, indent=1)
    write_chart(results, paths[2])
    return paths

"""The pure part of tests/perf/compare.py (compare_report): medians, min-max, ours/peer ratios
and the markdown report, from a fixed set of figures. Nothing here starts a server."""
from __future__ import annotations

import json

from tests.perf.compare_report import (Results, SystemInfo, fmt_summary, markdown_table,
                                       ratio, ratio_rows, render_markdown, summarize, table,
                                       to_json, write_report)


def fixed_results() -> Results:
    r = Results(systems=[
        SystemInfo("ours-async", "ours, ASYNC_FLUSH", "page cache", ours=True),
        SystemInfo("nats-r1", "NATS R1", "not fsynced", peer_of="ours-async"),
        SystemInfo("redis-always", "Redis always", "fsynced", peer_of="ours-syncflush"),
    ])
    for v in (15500, 16800, 16100):
        r.add("ours-async", "produce_x4", v)
    for v in (26300, 27400, 27000):
        r.add("nats-r1", "produce_x4", v)
    for v in (1.0, 0.97, 1.09):
        r.add("ours-async", "seq_p50", v)
    for v in (0.25, 0.30, 0.26):
        r.add("nats-r1", "seq_p50", v)
    r.add_cpu("ours-async", "master", 60.0)
    r.add_cpu("ours-async", "master", 58.0)
    r.meta = {"command": "python -m tests.perf.compare --quick", "cpus": 2, "repeat": 3}
    r.notes.append("redis-always: skipped in this fixture")
    return r


def test_summary_is_median_and_min_max() -> None:
    s = summarize([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.low, s.high, s.n) == (2.5, 1.0, 10.0, 4)
    assert summarize([]) is None


def test_ratio_of_medians_and_missing_figures() -> None:
    assert ratio(summarize([16100.0]), summarize([27000.0])) == 16100 / 27000
    assert ratio(None, summarize([1.0])) is None
    assert ratio(summarize([1.0]), summarize([0.0])) is None


def test_cell_shows_median_then_range() -> None:
    assert fmt_summary(summarize([15500, 16800, 16100]), "msg/s") == "16.1k (15.5k-16.8k)"
    assert fmt_summary(summarize([0.97, 1.0, 1.09]), "ms") == "1.00 (0.97-1.09)"
    assert fmt_summary(summarize([5.0]), "ms") == "5.00"
    assert fmt_summary(None, "ms") == "-"


def test_table_has_one_column_per_system_and_only_measured_rows() -> None:
    rows = table(fixed_results())
    assert rows[0] == ["figure", "unit", "ours-async", "nats-r1", "redis-always"]
    assert [r[0] for r in rows[1:]] == ["batched produce, 4 producers", "sequential produce p50"]
    assert rows[1][2:] == ["16.1k (15.5k-16.8k)", "27.0k (26.3k-27.4k)", "-"]


def test_ratio_rows_pair_each_peer_with_ours_present_in_the_run() -> None:
    rows = ratio_rows(fixed_results())
    # redis-always's counterpart (ours-syncflush) did not run: no column for it
    assert rows[0] == ["figure", "ours-async / nats-r1"]
    assert rows[1] == ["batched produce, 4 producers", f"{16100 / 27000:.2f}"]
    assert rows[2] == ["sequential produce p50", f"{1.0 / 0.26:.2f}"]


def test_markdown_report() -> None:
    md = render_markdown(fixed_results())
    assert md.startswith("# Performance versus NATS JetStream and Redis\n")
    assert "`python -m tests.perf.compare --quick`" in md and "2 CPUs" in md
    assert "| batched produce, 4 producers | msg/s | 16.1k (15.5k-16.8k) | 27.0k (26.3k-27.4k) | - |" in md
    assert "| ours-async | master | 59.0 (58.0-60.0) |" in md
    assert "| redis-always | Redis always | fsynced |" in md
    assert "- redis-always: skipped in this fixture" in md
    assert markdown_table([["a", "b"], ["1", "2"]]) == "| a | b |\n|---|---|\n| 1 | 2 |"


def test_report_files(tmp_path) -> None:
    paths = write_report(fixed_results(), str(tmp_path / "out"))
    assert [p.rsplit("/", 1)[1] for p in paths] == ["report.md", "report.json", "chart.png"]
    data = json.loads(open(paths[1]).read())
    assert data["summary"]["nats-r1"]["produce_x4"]["median"] == 27000
    with open(paths[2], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_host_steal_per_system_is_reported_only_when_measured() -> None:
    r = fixed_results()
    assert "CPU stolen by the host" not in render_markdown(r)  # no /proc/stat steal: none
    r.steal = {"ours-async": 12.04, "nats-r1": 0.96}
    md = render_markdown(r)
    assert "| ours-async | 12.0 |\n| nats-r1 | 1.0 |" in md
    assert md.index("CPU stolen by the host") < md.index("## Durability of each system")
    assert json.loads(json.dumps(to_json(r)))["steal_pct"] == {"ours-async": 12.04,
                                                                "nats-r1": 0.96}

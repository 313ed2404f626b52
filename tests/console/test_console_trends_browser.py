"""The console over time, in a real headless Chromium against a real local cluster: under a
steady load of real sends (tests/console/load.py, its own process) the controller's page charts
non-zero produce and consume rates and a stalled consumer group's lag, which it highlights as
growing; a slave that is stopped (SIGSTOP) is highlighted, and the highlight goes once it runs
again. The controller samples every 5 s (cluster/console/trends.py): a chart needs two samples,
a growing lag five."""
from __future__ import annotations

import os
import signal

from tests.console.browser import group_view, load, master_address, open_console, text
from tests.integration.harness import wait_until

SAMPLE_S = 5.0


def now_value(browser, key: str) -> float:
    """The legend's latest value of a line ("-" before it has one: -1)."""
    raw = browser.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';",
        f"#trends .now-{key}") or "-"
    if raw == "-":
        return -1.0
    scale = {"k": 1e3, "M": 1e6}.get(raw[-1], 1.0)
    return float(raw.rstrip("kM")) * scale


def points(browser, css: str) -> int:
    """How many points the polylines matching `css` draw."""
    return browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].reduce((n, p) =>"
        " n + p.points.numberOfItems, 0);", css)


def test_the_charts_show_real_sends_and_a_stalled_groups_growing_lag(browser, cluster,
                                                                     tmp_path):
    with load(master_address(cluster), "Orders", 200, 120, "billing", "audit"):
        open_console(browser, cluster)
        wait_until(lambda: now_value(browser, "produce") > 50, 4 * SAMPLE_S + 10,
                   "a produce rate on the chart")
        wait_until(lambda: now_value(browser, "consume") > 50, 2 * SAMPLE_S + 5,
                   "a consume rate on the chart")
        # a line once two samples in a row have a rate (the first after a start has none)
        wait_until(lambda: points(browser, "#rates-broker-a .line-produce") >= 2,
                   2 * SAMPLE_S + 5, "a line of the produce rate")
        assert float(browser.find_element("id", "rates-broker-a").get_attribute("data-max")) > 50
        # the stalled group's lag grows with every send; the one that keeps up stays low
        found = wait_until(lambda: "lag growing" in (t := text(browser, "highlights")) and t,
                           6 * SAMPLE_S + 10, "the growing lag highlighted")
        assert "consumer group audit" in found and "lag rose 4 times in a row" in found
        assert "consumer group billing" not in found
        assert now_value(browser, "lag-audit") > 1000
        assert points(browser, "#lag-broker-a .line-lag-audit") >= 5
        browser.save_screenshot(str(tmp_path / "trends.png"))


def test_a_stopped_slave_is_highlighted_until_it_runs_again(browser, cluster, tmp_path):
    group = group_view(cluster)
    node_id = next(n["node_id"] for n in group["nodes"] if n["node_id"] != group["master_id"])
    pid = cluster.info()["nodes"][int(node_id.rpartition(":")[2])]["pid"]
    open_console(browser, cluster)
    wait_until(lambda: text(browser, "all-well"), 30, "nothing needs attention")
    with load(master_address(cluster), "Orders", 100, 90, "billing"):
        os.kill(pid, signal.SIGSTOP)
        try:
            found = wait_until(lambda: node_id in (t := text(browser, "highlights")) and
                               "silent" in t and "out of sync set" in t and t,
                               30, f"{node_id} highlighted")
            assert "no heartbeat for" in found and "out of the sync state set" in found
            browser.save_screenshot(str(tmp_path / "stopped-slave.png"))
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_until(lambda: text(browser, "all-well"), 60, "the highlight gone again")

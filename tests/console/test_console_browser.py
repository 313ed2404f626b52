"""The web console in a real headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium): against a real local cluster, the controller's page shows the master, the master is
killed, and the page shows the new master within the failover time; a message is found by key
through the page's lookup form. Screenshots go to the test's folder, and into
docs/assets/console/ with RMQSTORE_UPDATE_SCREENSHOTS=1 (the docs' console page)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

from tests.console.browser import open_console, text
from tests.integration.harness import ROOT, wait_until

SCREENSHOTS = os.path.join(ROOT, "docs", "assets", "console")
FAILOVER_S = 3.0  # the local cluster's controllerFailoverTimeoutMillis default


def shot(browser, tmp_path, name: str) -> None:
    path = os.path.join(str(tmp_path), name)
    browser.save_screenshot(path)
    if os.environ.get("RMQSTORE_UPDATE_SCREENSHOTS") == "1":
        os.makedirs(SCREENSHOTS, exist_ok=True)
        shutil.copy(path, os.path.join(SCREENSHOTS, name))


def test_the_page_shows_the_new_master_after_the_master_is_killed(browser, cluster, tmp_path):
    open_console(browser, cluster)
    first = wait_until(lambda: text(browser, "master-broker-a").startswith("broker-a:") and
                       text(browser, "master-broker-a"), 30, "the page shows a master")
    pids = {f"broker-a:{i}": n["pid"] for i, n in enumerate(cluster.info()["nodes"])}
    epoch = int(text(browser, "epoch-broker-a"))
    os.kill(pids[first], signal.SIGKILL)
    killed = time.monotonic()
    new = wait_until(lambda: (t := text(browser, "master-broker-a")) not in ("", first, "none")
                     and t, 30, "the page shows the new master", interval=0.1)
    shown_after = time.monotonic() - killed
    print(f"killed master {first}; the page showed {new} after {shown_after:.2f} s")
    assert int(text(browser, "epoch-broker-a")) > epoch
    assert shown_after < FAILOVER_S + 5  # failover timeout, the election, one page refresh
    assert "no heartbeat" in browser.page_source or "out of its term" in browser.page_source
    shot(browser, tmp_path, "failover.png")


def test_a_message_is_found_by_key_on_the_page(browser, cluster, tmp_path):
    root = cluster.root
    out = subprocess.run([sys.executable, "-m", "cluster", "produce", "--cluster-dir", root,
                          "--topic", "Orders", "--count", "30", "--keys", "order-{i}",
                          "--body", "order number {i}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr
    open_console(browser, cluster)
    wait_until(lambda: text(browser, "master-broker-a").startswith("broker-a:"), 30)
    browser.find_element("id", "lookup-topic").send_keys("Orders")
    browser.find_element("id", "lookup-key").send_keys("order-17")
    browser.find_element("id", "lookup-go").click()
    wait_until(lambda: browser.find_elements("css selector", "#lookup-result .msg-id"), 15,
               "a result")
    result = text(browser, "lookup-result")
    assert "order number 17" in result and "order-17" in result
    wait_until(lambda: "Orders" in text(browser, "topics"), 15, "topics listed")
    # The master's slaves with how long puts waited for their acks (the 30 sends did).
    replication = wait_until(lambda: (t := text(browser, "replication")).count("joined: caught up")
                             == 2 and t, 15, "the replication table")
    assert "ack latency" in replication and " ms" in replication
    shot(browser, tmp_path, "lookup.png")

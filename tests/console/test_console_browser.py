"""The web console in a real headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium): against a real local cluster, the controller's page shows the master, the master is
killed, and the page shows the new master within the failover time; a message is found by key
through the page's lookup form. Screenshots go to the test's folder, and into
cluster/console/screenshots/ with RMQSTORE_UPDATE_SCREENSHOTS=1 (the README's)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from tests.integration.harness import ROOT, LocalCluster, wait_until

SCREENSHOTS = os.path.join(ROOT, "cluster", "console", "screenshots")
FAILOVER_S = 3.0  # the local cluster's controllerFailoverTimeoutMillis default


@pytest.fixture
def browser(tmp_path):
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver_path:
        pytest.fail("chromium and chromium-driver are needed (scripts/setup installs them as "
                    "root with apt-get)")
    from selenium import webdriver
    # Chromium leaves its process-singleton folder in TMPDIR after quit: give it a TMPDIR of
    # its own, removed below. A short one: the socket inside must fit a Unix socket path
    # (108 bytes), which a folder under the test's tmp_path does not.
    scratch = tempfile.mkdtemp(prefix="chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1500,1100", f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(arg)
    service = webdriver.ChromeService(executable_path=driver_path,
                                      env={**os.environ, "TMPDIR": scratch})
    try:
        driver = webdriver.Chrome(options=options, service=service)
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(str(tmp_path / "cluster"))
    try:
        c.wait_for("Ctrl-C stops everything", timeout=90)
        yield c
    finally:
        c.kill_all()


def open_console(browser, cluster) -> None:
    info = cluster.info()
    with open(info["token_file"], encoding="utf-8") as fh:
        token = fh.read().strip()
    browser.get(f"http://{info['controller']['metrics']}/")
    browser.find_element("id", "token").send_keys(token)
    browser.find_element("id", "save-token").click()


def text(browser, element_id: str) -> str:
    # One script call reads the element atomically: the page re-renders every refresh, and an
    # element found first and read after can be replaced in between (stale element reference).
    return browser.execute_script(
        "const e = document.getElementById(arguments[0]); return e ? e.innerText : '';",
        element_id) or ""


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

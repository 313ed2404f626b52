"""What the console's browser tests and the screenshot script share: Debian's chromium headless
under Selenium, the page opened with the cluster's admin token, its text read atomically, and
the load process (tests/console/load.py) started and ended by its pid."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
from typing import Iterator

from tests.integration.harness import ROOT, LocalCluster, wait_until

WINDOW = "--window-size=1500,1100"


@contextlib.contextmanager
def chromium(profile_dir: str, window: str = WINDOW) -> Iterator:
    """A headless Chromium driven by chromedriver, quit and its scratch folder removed after."""
    chromium_path, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium_path or not driver_path:
        raise RuntimeError("chromium and chromium-driver are needed (scripts/setup installs "
                           "them as root with apt-get)")
    from selenium import webdriver
    # Chromium leaves its process-singleton folder in TMPDIR after quit: give it a TMPDIR of
    # its own, removed below. A short one: the socket inside must fit a Unix socket path
    # (108 bytes), which a folder under the test's tmp_path does not.
    scratch = tempfile.mkdtemp(prefix="chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium_path
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", window,
                f"--user-data-dir={profile_dir}"):
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


def open_console(browser, cluster: LocalCluster) -> None:
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


def console_api(cluster: LocalCluster, path: str) -> dict:
    """GET the controller's console API (the cluster's admin token)."""
    info = cluster.info()
    with open(info["token_file"], encoding="utf-8") as fh:
        token = fh.read().strip()
    request = urllib.request.Request(f"http://{info['controller']['metrics']}{path}",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def group_view(cluster: LocalCluster, timeout: float = 30.0) -> dict:
    """broker-a as the controller has it once it has a master."""
    return wait_until(lambda: next((g for g in console_api(cluster, "/api/cluster")["groups"]
                                    if g["master_id"]), None), timeout, "a master")


def master_address(cluster: LocalCluster) -> str:
    return group_view(cluster)["master_address"]


@contextlib.contextmanager
def load(address: str, topic: str, rate: int, seconds: float, *groups: str) -> Iterator:
    """tests/console/load.py against `address` until the block ends (then killed by its pid):
    `groups` are --group and --stalled-group (each may be "")."""
    args = ["--address", address, "--topic", topic, "--rate", str(rate),
            "--seconds", str(seconds)]
    for flag, group in zip(("--group", "--stalled-group"), groups):
        if group:
            args += [flag, group]
    proc = subprocess.Popen([sys.executable, "-m", "tests.console.load", *args], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        first = proc.stdout.readline() if proc.stdout else ""
        if not first or not json.loads(first).get("ready"):
            rest = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"the load did not start: {first}{rest}")
        # its line a second is not needed: drained, so a long run never fills the pipe
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

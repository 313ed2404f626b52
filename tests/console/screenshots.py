"""Screenshots of the console over time, from a real local cluster under load, for the docs:

    python -m tests.console.screenshots [--out docs/assets/console] [--minutes 3]

It starts `python -m cluster local` in a temporary folder (a controller and three nodes as
processes), puts a steady load on it through a slave (tests/console/load.py: sends forwarded to
the master, a consumer group that keeps up and one that stalls after its first batch), adds a
burst of sends on a second topic halfway, and after `--minutes` writes, with Debian's chromium
headless:

    overview.png   the controller's page: the highlights (the stalled group's lag growing)
                   and the charts of the rates and the consumer lags
    highlight.png  then the master is killed: the failover on the charts (a dashed line), the
                   old master silent and out of the sync state set

Everything it started is ended by pid, and the folder removed. It lives beside the browser
tests, not in cluster/: it drives the tests' harness (LocalCluster, the load, the browser
helpers) and Selenium, which are test dependencies, not part of the installed package.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time

from tests.console.browser import chromium, group_view, load, open_console, text
from tests.integration.harness import ROOT, LocalCluster, wait_until

DEFAULT_OUT = os.path.join("docs", "assets", "console")
WINDOW = "--window-size=1280,1000"
MAX_BYTES = 300_000


def shoot(browser, path: str) -> None:
    """A screenshot of the page scrolled to its top; refused when it is not small."""
    browser.execute_script("window.scrollTo(0, 0)")
    time.sleep(0.5)
    browser.save_screenshot(path)
    size = os.path.getsize(path)
    print(f"wrote {path} ({size // 1024} KiB)", flush=True)
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes, over {MAX_BYTES}: shrink the window")


def run(out: str, minutes: float) -> None:
    root = tempfile.mkdtemp(prefix="console-shots-")
    cluster = LocalCluster(os.path.join(root, "cluster"))
    try:
        cluster.wait_for("Ctrl-C stops everything", timeout=120)
        group = group_view(cluster)
        master = group["master_id"]
        via = next(n for n in group["nodes"] if n["node_id"] != master)["address"]
        pids = {f"broker-a:{i}": n["pid"] for i, n in enumerate(cluster.info()["nodes"])}
        seconds = minutes * 60
        with contextlib.ExitStack() as stack:
            stack.enter_context(load(via, "Orders", 250, seconds + 120, "billing", "audit"))
            browser = stack.enter_context(chromium(os.path.join(root, "profile"), WINDOW))
            open_console(browser, cluster)
            print(f"load through {via}; charts filling for {seconds:.0f} s", flush=True)
            time.sleep(seconds / 2)
            with load(via, "Clicks", 400, seconds / 4):  # a burst on a second topic
                time.sleep(seconds / 4)
            time.sleep(seconds / 4)
            wait_until(lambda: "lag growing" in text(browser, "highlights"), 60,
                       "the stalled group highlighted")
            shoot(browser, os.path.join(out, "overview.png"))
            os.kill(pids[master], signal.SIGKILL)
            print(f"killed the master {master}", flush=True)
            wait_until(lambda: (t := text(browser, "highlights")) and master in t
                       and "out of sync set" in t, 60, "the old master highlighted")
            time.sleep(15)  # a few samples after the failover on the charts
            shoot(browser, os.path.join(out, "highlight.png"))
    finally:
        cluster.kill_all()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.console.screenshots", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=DEFAULT_OUT, help="folder, relative to the repository "
                                                      f"(default {DEFAULT_OUT})")
    p.add_argument("--minutes", type=float, default=3.0,
                   help="load before the first screenshot (1..15)")
    args = p.parse_args(argv)
    if not 1 <= args.minutes <= 15:
        p.error("--minutes must be in 1..15")
    out = os.path.join(ROOT, args.out)
    os.makedirs(out, exist_ok=True)
    run(out, args.minutes)
    return 0


if __name__ == "__main__":
    sys.exit(main())

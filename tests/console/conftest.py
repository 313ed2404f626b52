"""The console's browser tests' fixtures: a headless Chromium, and a real local cluster (a
controller and three nodes as processes, killed by pid after the test)."""
from __future__ import annotations

import pytest

from tests.console.browser import chromium
from tests.integration.harness import LocalCluster


@pytest.fixture
def browser(tmp_path):
    try:
        with chromium(str(tmp_path / "chromium-profile")) as driver:
            yield driver
    except RuntimeError as e:  # no chromium: say what to install
        pytest.fail(str(e))


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(str(tmp_path / "cluster"))
    try:
        c.wait_for("Ctrl-C stops everything", timeout=90)
        yield c
    finally:
        c.kill_all()

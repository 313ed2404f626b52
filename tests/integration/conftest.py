"""Fixtures of the integration suite: a temp dir and a `Group` of real node processes that is
always reaped (by pid) and removed afterwards. On failure the nodes' log tails are printed."""
from __future__ import annotations

import shutil
import tempfile

import pytest

from .harness import Group


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture
def workdir():
    path = tempfile.mkdtemp(prefix="rmq-it-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def group(request, workdir):
    g = Group(workdir)
    try:
        yield g
    finally:
        failed = any(getattr(getattr(request.node, f"rep_{w}", None), "failed", False)
                     for w in ("setup", "call"))
        g.close()
        if failed:
            print(g.logs())

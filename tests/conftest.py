"""Fixtures shared by every test package: in-process nodes (tests/support/nodes.py) for one
test or one module, and a manual clock to run them by."""
from __future__ import annotations

import time

import pytest

from store.clock import ManualClock
from tests.support.nodes import Nodes


@pytest.fixture
def nodes(tmp_path):
    """In-process nodes in tmp_path, stopped (with their clients) after the test."""
    with Nodes(str(tmp_path)) as n:
        yield n


@pytest.fixture(scope="module")
def module_nodes(tmp_path_factory):
    """In-process nodes shared by the tests of one module, stopped after its last test."""
    with Nodes(str(tmp_path_factory.mktemp("nodes"))) as n:
        yield n


@pytest.fixture
def clock():
    """A ManualClock at the real wall-clock time: a node started with it sees time move only
    by clock.advance()."""
    return ManualClock(time.time_ns() // 1_000_000)

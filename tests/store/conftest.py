"""Fixtures of the store tool's tests: a demo store made once, and a private copy per test."""
from __future__ import annotations

import shutil

import pytest

from store.cli.store_cli import main
from tests.store.tool_helpers import DEMO_MESSAGES, FILE_SIZE


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo") / "store"
    rc = main(["demo", str(root), "--messages", str(DEMO_MESSAGES), "--file-size", str(FILE_SIZE)])
    assert rc == 0
    return root


@pytest.fixture
def demo(demo_template, tmp_path):
    """A private copy of the demo store (tests damage it)."""
    root = tmp_path / "store"
    shutil.copytree(demo_template, root)
    return root

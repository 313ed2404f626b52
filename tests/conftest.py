"""Fixtures shared by every test package: in-process nodes (tests/support/nodes.py) for one
test or one module, a manual clock to run them by, a store led without a node for replicated
tables (tests/support/leader_store.py), a real etcd (tests/support/etcd.py), and a group of real node processes
(tests/integration/harness.py)."""
from __future__ import annotations

import os

from cluster.grpc_env import use_node_transport

# In-process nodes run on the nodes' gRPC transport: set before grpc is imported, which reads
# it then; taken out again so subprocesses choose their own (node processes set it themselves,
# the official clients keep gRPC's default).
if use_node_transport():
    __import__("grpc")  # reads GRPC_EXPERIMENTS now
    del os.environ["GRPC_EXPERIMENTS"]

import time  # noqa: E402

import pytest  # noqa: E402

from common.clock import ManualClock
from tests.integration.harness import Group
from tests.support.etcd import EtcdServer
from tests.support.leader_store import LeaderStore
from tests.support.nodes import Nodes
from tests.support import workers
from tests.support.volumes import tmpfs_volumes


def pytest_collection_modifyitems(config, items):
    """The longest worker groups first (tests/support/workers.py); a module's tests keep their
    order (the sort is stable)."""
    items.sort(key=lambda item: workers.rank(item.nodeid))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """What shares a worker when scripts/test runs the suite on two (tests/support/workers.py)."""
    return workers.scheduler(config, log)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (rep_setup, rep_call): fixtures read it to
    print the logs of a failed test's processes."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


def _failed(request) -> bool:
    return any(getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
               for when in ("setup", "call"))


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
def leader(tmp_path):
    """A store led by a MasterRole, without a node (tests/support/leader_store.py): what a
    replicated table needs."""
    ls = LeaderStore(str(tmp_path / "leader"))
    yield ls
    ls.close()


@pytest.fixture
def clock():
    """A ManualClock at the real wall-clock time: a node started with it sees time move only
    by clock.advance()."""
    return ManualClock(time.time_ns() // 1_000_000)


@pytest.fixture
def group(request, tmp_path):
    """Real node processes in tmp_path, killed (by pid) after the test; when the test failed
    their log tails are printed."""
    g = Group(str(tmp_path))
    try:
        yield g
    finally:
        g.close()
        if _failed(request):
            print(g.logs())


@pytest.fixture
def etcd(tmp_path):
    """A real etcd on free 127.0.0.1 ports (skips when none is installed), killed after."""
    with EtcdServer(str(tmp_path / "etcd")) as server:
        yield server


@pytest.fixture
def volume(tmp_path):
    """make(size_mb) -> a tmpfs mounted for this test (tests/support/volumes.py)."""
    yield from tmpfs_volumes(str(tmp_path))

"""Fixtures of the Admin API tests."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from cluster.client.admin_client import AdminClient
from cluster.assembly.node import Node
from tests.support.nodes import SteppedWallClock


@dataclass(frozen=True)
class Pair:
    master: Node
    slave: Node
    m: AdminClient  # the master's admin client
    s: AdminClient  # the slave's
    clock: SteppedWallClock  # the master's: store timestamps move only by clock.advance()


@pytest.fixture(scope="module")
def pair(module_nodes) -> Pair:
    """A master and its in-sync slave with an admin client each, shared by a module's tests.
    The master's wall clock (store timestamps) moves only when a test advances it; monotonic
    time is real, so replication runs as usual."""
    clock = SteppedWallClock()
    master = module_nodes.start(clock=clock)
    slave = module_nodes.slave(master)
    return Pair(master, slave, module_nodes.admin(master), module_nodes.admin(slave), clock)

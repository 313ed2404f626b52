"""Fixtures of the client tests: real nodes in this process (gRPC on 127.0.0.1), stopped and
removed afterwards, and client connections closed before them."""
from __future__ import annotations

import os

import pytest

from cluster.client import ClientConfig, Connection
from cluster.node.node import Node
from cluster.node.node_config import NodeConfig
from store.config import StoreConfig
from tests.integration.harness import free_port, wait_until

FAST_HA = dict(ha_send_heartbeat_interval=200, ha_housekeeping_interval=3000,
               ha_max_time_slave_not_catchup=1500, slave_timeout=1000,
               ha_reconnect_min_backoff=100, ha_reconnect_max_backoff=500)


class Nodes:
    def __init__(self, root: str) -> None:
        self.root = root
        self.started: list[Node] = []
        self.connections: list[Connection] = []

    def start(self, name: str = "master", role: str = "ASYNC_MASTER", broker_id: int = 0,
              master_address: str = "", store: dict | None = None, **node_keys) -> Node:
        keys = dict(store_path_root_dir=os.path.join(self.root, name), broker_role=role,
                    listen_port=free_port(), broker_ip1="127.0.0.1",
                    mapped_file_size_commit_log=4 * 1024 * 1024,
                    ha_master_address=master_address, max_message_size=256 * 1024, **FAST_HA)
        cfg = StoreConfig(**{**keys, **(store or {})})
        node = Node(NodeConfig(admin_token="t", broker_id=broker_id, store=cfg, **node_keys))
        node.start()
        self.started.append(node)
        return node

    def connect(self, node_or_endpoints, **config) -> Connection:
        endpoints = node_or_endpoints if isinstance(node_or_endpoints, str) \
            else node_or_endpoints.address
        conn = Connection(ClientConfig(endpoints, **config))
        self.connections.append(conn)
        return conn

    def close(self) -> None:
        for conn in self.connections:
            conn.close()
        for node in reversed(self.started):
            node.stop()


@pytest.fixture
def nodes(tmp_path):
    n = Nodes(str(tmp_path))
    try:
        yield n
    finally:
        n.close()


def settle(node: Node) -> None:
    """Wait until reput dispatched everything appended (sends answer before it)."""
    store = node.store
    wait_until(lambda: store.reput.reput_from_offset >= store.max_phy_offset(), 10, "dispatch")

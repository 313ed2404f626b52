"""Real in-process nodes for the Admin API tests: a node on a 127.0.0.1 port with small
commitlog files, and an AdminClient holding its token. Shared by tests/admin/test_admin_*.py."""
from __future__ import annotations

import os

from cluster.client.admin_client import AdminClient
from cluster.node.node import Node
from cluster.node.node_config import NodeConfig
from store.config import StoreConfig
from tests.integration.harness import free_port, wait_until

TOKEN = "admin-test-token"
FAST_HA = dict(ha_send_heartbeat_interval=200, ha_housekeeping_interval=3000,
               ha_max_time_slave_not_catchup=1500, slave_timeout=1000,
               ha_reconnect_min_backoff=100, ha_reconnect_max_backoff=500)


def make_node(root: str, name: str = "master", *, role: str = "ASYNC_MASTER", broker_id: int = 0,
              master_address: str = "", io=None, **store_keys) -> Node:
    """A started node; `io` swaps in a FileIO (fault injection) before its store is loaded."""
    store = StoreConfig(store_path_root_dir=os.path.join(root, name), broker_role=role,
                        listen_port=free_port(), broker_ip1="127.0.0.1",
                        mapped_file_size_commit_log=64 * 1024, ha_master_address=master_address,
                        **{**FAST_HA, **store_keys})
    node = Node(NodeConfig(admin_token=TOKEN, broker_id=broker_id, store=store))
    if io is not None:
        from store.message_store import MessageStore
        node.store = MessageStore(store, io=io, clock=node.clock)
    node.start()
    return node


def make_slave(root: str, master: Node, name: str = "slave1") -> Node:
    slave = make_node(root, name, role="SLAVE", broker_id=1, master_address=master.address)
    wait_until(lambda: master.role.master is not None and
               len(master.role.master.tracker.in_sync_ids()) >= 1, 20, "the slave in sync")
    return slave


def client(node: Node, token: str = TOKEN) -> AdminClient:
    return AdminClient(node.address, token, timeout=15, operator="pytest")


def dispatched(*nodes: Node) -> None:
    """Wait until each node's consume queues and index hold everything its commitlog holds
    (reput runs in the background, bounded by what the slaves confirmed)."""
    for node in nodes:
        store = node.store
        wait_until(lambda: store.reput.reput_from_offset >= store.max_phy_offset(), 20,
                   f"{node.config.node_id} dispatched")

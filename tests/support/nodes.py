"""In-process nodes for tests: real nodes (cluster/assembly/node.py) serving gRPC on free
127.0.0.1 ports in this process, each with its store in <root>/<name>, 1 MiB commitlog files
and fast replication timings.

    nodes = Nodes(root)                       # tests take the `nodes` fixture (tests/conftest.py)
    master = nodes.start()                    # ASYNC_MASTER; NodeConfig fields as keywords
    slave = nodes.slave(master)               # started and in the master's in-sync set
    clocked = nodes.start("m2", clock=ManualClock())   # time moves only by clock.advance()
    stub = nodes.stub(master)                 # MessagingService (apache.rocketmq.v2)
    admin = nodes.admin(master)               # AdminClient with the nodes' token
    conn = nodes.connect(master)              # cluster.client Connection
    settle(master)                            # reput dispatched everything appended
    nodes.restart(master)                     # stopped and started again on its store and port
    nodes.close()                             # connections, channels, then nodes (newest first)
    tls = nodes.tls("master")                 # TlsSettings with a certificate of the test CA
    secure = nodes.start(tls=tls)             # serves TLS; stub/admin/connect trust the CA

A ManualClock node runs its invisibility times, long polls, delays and transaction checks by
that clock: a long poll on an empty queue then ends only when the test advances the clock (or
at the call's gRPC deadline), so "nothing is there" checks use a zero wait. Nodes whose
replication must keep running (a slave and its master) keep real monotonic time: heartbeats
are timed by it. A SteppedWallClock gives such a master store timestamps that move only when
the test says so.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable

import grpc

from cluster.client import ClientConfig, Connection
from cluster.client.admin_client import AdminClient
from cluster.assembly.node import Node
from cluster.config.node_config import NodeConfig
from cluster.security.cert_authority import ensure_ca, ensure_leaf
from cluster.security.tls import ClientTls, TlsSettings, open_channel
from proto import batch_receive_pb2_grpc as br_grpc
from proto.apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from common.clock import SYSTEM_CLOCK, Clock
from store.config import FIELD_BY_KEY, StoreConfig

from tests.support.waiting import FAST_HA, free_port, wait_until

TOKEN = "test-admin-token"
CLUSTER_SECRET = "test-cluster-secret-0123456789"
STORE_DEFAULTS = dict(mapped_file_size_commit_log=1024 * 1024, max_message_size=256 * 1024,
                      **{FIELD_BY_KEY[key]: int(value) for key, value in FAST_HA.items()})


class SteppedWallClock(Clock):
    """Real monotonic time (timeouts, heartbeats and long polls run as usual) and wall-clock
    milliseconds (store timestamps) that move only by advance()."""

    def __init__(self, start_ms: int | None = None) -> None:
        self._ms = time.time_ns() // 1_000_000 if start_ms is None else start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._ms

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._ms += int(round(seconds * 1000))


class Nodes:
    """The nodes of one test (or one test module) in folder `root`; `close()` stops them all."""

    def __init__(self, root: str) -> None:
        self.root = str(root)
        self.started: list[Node] = []
        self._again: dict[Node, Callable[[int], Node]] = {}
        self._channels: list[grpc.Channel] = []
        self._clients: list[AdminClient | Connection] = []

    def __enter__(self) -> "Nodes":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- nodes --------------------------------------------------------------------------------
    def start(self, name: str = "master", *, role: str = "ASYNC_MASTER", broker_id: int = 0,
              master_address: str = "", clock: Clock = SYSTEM_CLOCK, io=None, port: int = 0,
              store: dict | None = None, **node_keys) -> Node:
        """A started node. `store`: StoreConfig fields over STORE_DEFAULTS; `node_keys`:
        NodeConfig fields; `io`: the store's FileIO (fault injection); `port`: 0 for a free
        one. Every node knows CLUSTER_SECRET unless `cluster_secret` says otherwise."""
        config = StoreConfig(store_path_root_dir=os.path.join(self.root, name), broker_role=role,
                             listen_port=port or free_port(), broker_ip1="127.0.0.1",
                             ha_master_address=master_address,
                             **{**STORE_DEFAULTS, **(store or {})})
        keys = {"cluster_secret": CLUSTER_SECRET, **node_keys}
        node = Node(NodeConfig(admin_token=TOKEN, broker_id=broker_id, store=config, **keys),
                    clock=clock)
        if io is not None:
            from store.message_store import MessageStore
            node.store = MessageStore(config, io=io, clock=clock)
        node.start()
        self.started.append(node)
        self._again[node] = lambda same_port: self.start(
            name, role=role, broker_id=broker_id, master_address=master_address, clock=clock,
            io=io, port=same_port, store=store, **node_keys)
        return node

    def slave(self, master: Node, name: str = "slave", broker_id: int = 1, **keys) -> Node:
        """A SLAVE of `master`, returned once the master counts it in sync."""
        slave = self.start(name, role="SLAVE", broker_id=broker_id,
                           master_address=master.address, **keys)
        wait_in_sync(master, slave)
        return slave

    def stop(self, node: Node) -> None:
        """Stop one node now (it is not stopped again by close())."""
        self.started.remove(node)
        self._again.pop(node)
        node.stop()

    def restart(self, node: Node) -> Node:
        """Stop `node` and start it again with the same settings, store and port."""
        again, port = self._again[node], node.port
        self.stop(node)
        return again(port)

    def tls(self, name: str, need_client_auth: bool = False,
            dns: tuple[str, ...] = ()) -> TlsSettings:
        """TlsSettings of a certificate for `name` (127.0.0.1, and `dns` names) issued by this
        test's CA, in <root>/tls."""
        folder = os.path.join(self.root, "tls")
        ca = ensure_ca(folder, "test")
        leaf = ensure_leaf(folder, name, ca, dns=dns)
        return TlsSettings(enabled=True, cert_file=leaf.cert_path, key_file=leaf.key_path,
                           trust_file=ca.cert_path, need_client_auth=need_client_auth)

    # -- clients ------------------------------------------------------------------------------
    @staticmethod
    def client_tls(node: Node) -> ClientTls | None:
        """What a client of `node` needs: its CA and (for a node that needs one) its own
        certificate as the client certificate; None for a plaintext node."""
        return node.config.tls.client()

    def stub(self, node: Node) -> s_grpc.MessagingServiceStub:
        channel = open_channel(node.address, self.client_tls(node))
        self._channels.append(channel)
        return s_grpc.MessagingServiceStub(channel)

    def batch_stub(self, node: Node) -> br_grpc.BatchReceiveStub:
        """A stub of proto/batch_receive.proto's service on `node`."""
        channel = open_channel(node.address, self.client_tls(node))
        self._channels.append(channel)
        return br_grpc.BatchReceiveStub(channel)

    def admin(self, node: Node, token: str = TOKEN) -> AdminClient:
        client = AdminClient(node.address, token, timeout=15, operator="pytest",
                             tls=self.client_tls(node))
        self._clients.append(client)
        return client

    def connect(self, node_or_endpoints: Node | str, **config) -> Connection:
        """A client Connection to a node (or to "host:port;host:port" endpoints)."""
        endpoints = node_or_endpoints if isinstance(node_or_endpoints, str) \
            else node_or_endpoints.address
        if not isinstance(node_or_endpoints, str):
            config.setdefault("tls", self.client_tls(node_or_endpoints))
        conn = Connection(ClientConfig(endpoints, **config))
        self._clients.append(conn)
        return conn

    def close(self) -> None:
        for client in self._clients:
            client.close()
        for channel in self._channels:
            channel.close()
        for node in reversed(self.started):
            node.stop()
        self._clients, self._channels, self.started = [], [], []
        self._again.clear()


def methods_called(node: Node) -> set[str]:
    """The gRPC method names (without service) this node has answered."""
    return {method.rpartition("/")[2] for method, _ in node.calls.snapshot()}


class MethodLog(grpc.ServerInterceptor):
    """A server interceptor that records each call's method name (for a bare grpc.server)."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    def intercept_service(self, continuation, handler_call_details):
        self.methods.append(handler_call_details.method.rpartition("/")[2])
        return continuation(handler_call_details)


def dispatched(node: Node) -> bool:
    """Reput dispatched everything the node's commitlog holds (on a slave: up to what its
    master confirmed)."""
    store = node.store
    return store.reput.reput_from_offset >= store.max_phy_offset()


def settle(*nodes: Node, timeout: float = 20) -> None:
    """Wait until reput dispatched everything appended (sends answer before it does)."""
    for node in nodes:
        wait_until(lambda: dispatched(node), timeout, f"{node.config.node_id} dispatched")


def wait_in_sync(master: Node, *slaves: Node, timeout: float = 20) -> None:
    """Wait until the master counts each of `slaves` in its in-sync set."""
    ids = {s.config.node_id for s in slaves}
    wait_until(lambda: master.role.master is not None and
               ids <= master.role.master.tracker.in_sync_ids(), timeout,
               f"{sorted(ids)} in sync with {master.config.node_id}")

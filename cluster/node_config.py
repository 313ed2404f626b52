"""Settings of one node: its identity in the cluster, the admin token, and its StoreConfig.

Read from a broker.conf-style file. Node keys (RocketMQ's names where RocketMQ has them):

    brokerClusterName  DefaultCluster    brokerName  broker-a    brokerId  0 (master) / >0
    brokerRole         ASYNC_MASTER | SYNC_MASTER | SLAVE         (a StoreConfig key)
    brokerIP1, listenPort                where the node's gRPC server listens (StoreConfig)
    haMasterAddress    host:port of the master, required for a SLAVE   (StoreConfig)
    adminToken         the bearer token of the Admin API (inline)
    adminTokenFile     or a file holding it; with neither, the node generates one into
                       <storePathRootDir>/config/admin.token (mode 0600) and logs the path
Every other key is a StoreConfig key; unknown keys are logged and ignored, as RocketMQ does.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from store.config import StoreConfig, parse_properties
from store.errors import ConfigError

log = logging.getLogger(__name__)

NODE_KEYS = frozenset({"brokerClusterName", "brokerName", "brokerId", "adminToken",
                       "adminTokenFile"})


@dataclass(frozen=True, kw_only=True)
class NodeConfig:
    cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    admin_token: str = ""
    admin_token_file: str = ""
    store: StoreConfig = field(default_factory=StoreConfig)

    def __post_init__(self) -> None:
        for name in ("cluster_name", "broker_name"):
            value = getattr(self, name)
            if not value or any(ch.isspace() or ch == ":" for ch in value):
                raise ConfigError(f"{name}={value!r}: must be non-empty without spaces or ':'")
        if self.broker_id < 0:
            raise ConfigError(f"brokerId={self.broker_id}: must be >= 0")
        if self.store.is_slave:
            if not self.store.ha_master_address:
                raise ConfigError("brokerRole=SLAVE needs haMasterAddress=<host>:<port> of the master")
            if self.broker_id == 0:
                raise ConfigError("brokerRole=SLAVE needs brokerId > 0 (0 is the master's id)")
        if self.admin_token and self.admin_token_file:
            raise ConfigError("set adminToken or adminTokenFile, not both")

    @property
    def node_id(self) -> str:
        return f"{self.broker_name}:{self.broker_id}"

    @property
    def listen_address(self) -> str:
        return f"{self.store.broker_ip1}:{self.store.listen_port}"

    @property
    def default_token_path(self) -> str:
        return os.path.join(self.store.store_path_root_dir, "config", "admin.token")


def node_config_from_properties(props: dict[str, str]) -> NodeConfig:
    store, unknown = StoreConfig.from_properties(props, NODE_KEYS)
    if unknown:
        log.warning("ignoring unknown config keys: %s", ", ".join(unknown))
    try:
        broker_id = int(props.get("brokerId", "0").strip())
    except ValueError:
        raise ConfigError(f"brokerId={props['brokerId']!r}: must be an integer") from None
    return NodeConfig(cluster_name=props.get("brokerClusterName", "DefaultCluster").strip(),
                      broker_name=props.get("brokerName", "broker-a").strip(),
                      broker_id=broker_id, admin_token=props.get("adminToken", "").strip(),
                      admin_token_file=props.get("adminTokenFile", "").strip(), store=store)


def load_node_config(path: str) -> NodeConfig:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from e
    return node_config_from_properties(parse_properties(text))

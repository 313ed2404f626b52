"""Settings of one node: its identity in the cluster, the admin token, and its StoreConfig.

Read from a broker.conf-style file. Node keys (RocketMQ's names where RocketMQ has them):

    brokerClusterName  DefaultCluster    brokerName  broker-a    brokerId  0 (master) / >0
    brokerRole         ASYNC_MASTER | SYNC_MASTER | SLAVE         (a StoreConfig key)
    brokerIP1, listenPort                where the node's gRPC server listens (StoreConfig)
    haMasterAddress    host:port of the master, required for a SLAVE   (StoreConfig)
    adminToken         the bearer token of the Admin API (inline)
    adminTokenFile     or a file holding it; with neither, the node generates one into
                       <storePathRootDir>/config/admin.token (mode 0600) and logs the path
Membership (cluster/security/member_proof.py): replication and controller calls are admitted
only after a challenge-response over the cluster's shared secret (it never crosses the wire):
    clusterSecret      the secret inline (at least 16 characters), the same on every node
    clusterSecretFile  or a file holding it. Without either the node admits no slave and
                       cannot follow a master or a controller: a SLAVE or a node with
                       controllerAddr needs one.
RocketMQ 5 client API (apache.rocketmq.v2.MessagingService, see cluster/messaging/):
    advertisedAddress  IPv4 host:port clients use to reach this node (default brokerIP1:<port>)
    groupAddresses     comma-separated IPv4 host:port of every node of the group, listed in
                       QueryRoute (default: this node's advertised address, plus its master's
                       address while it is a slave)
    autoCreateTopicEnable  true: QueryRoute/SendMessage create an unknown topic (on the master,
                       in the replicated topic table) with defaultTopicQueueNums (4) queues
    accessKey, secretKey   when both are set, every MessagingService call must carry a valid
                       MQv2-HMAC-SHA1 `authorization` (else UNAUTHORIZED)
    aclEnable, aclFile, aclDateTimeWindowSeconds   access control with a plain_acl.yml file
                       (cluster/security/access.py)
    minInvisibleTimeMillsForRecv  the shortest invisible duration ReceiveMessage and
                       ChangeInvisibleDuration accept (10000, RocketMQ 5 proxy's default)
Controller mode (see cluster/controller/): with `controllerAddr` set the node takes its role
from the controller, whatever brokerRole and brokerId say (brokerRole is only the hint a new
group starts from, and haMasterAddress is not needed):
    controllerAddr              host:port of the controller; several controllers sharing their
                                state in etcd as host:port;host:port (RocketMQ's separator):
                                heartbeats go to the active one (cluster/assembly/controller_link.py)
    controllerHeartbeatInterval ms between two heartbeats to it (500)
    brokerElectionPriority      the lower wins an election between equally complete nodes (0)
TLS on the node's port and its calls to peers (cluster/security/tls.py has the details):
    tlsEnable                   false; true: serve TLS only, call the master and the controller
                                over TLS
    tlsServerCertPath, tlsServerKeyPath   the PEM certificate and key it presents (to clients,
                                and to its peers as its client certificate)
    tlsServerTrustCertPath      the PEM CA that verifies the peers it calls and, with
                                tlsServerNeedClientAuth=true, its clients' certificates
Transactions (RocketMQ's BrokerConfig names and defaults, see cluster/messaging/transaction*.py):
    transactionTimeOut       ms a half message stays unchecked after it was stored (6000)
    transactionCheckMax      checks sent before an unanswered transaction is rolled back (15)
    transactionCheckInterval ms between two check-back rounds of the master (60000)
The commitlog archive (archiveAddress, archiveShipFrom, ...): cluster/config/shipping_config.py.
    metricsListenAddress  host:port of the Prometheus metrics endpoint (GET /metrics;
                       cluster/metrics/node_collector.py lists the metrics) and the node's
                       console; HTTPS with the node's certificate when tlsEnable; empty: none
    serverEventLoop    uvloop (default) | asyncio: the event loop of the node's gRPC server
                       (cluster/serving/grpc_server.py)
    receiveConversionProcessEnable  true (default): a master builds the messages of its
                       receives' answers in a child process that reads the commitlog
                       files itself (cluster/consume/conversion_process.py); false: in the
                       serving process
Client limits (maxUserPropertySize, userPropertyMaxNum, maxBatchMessageCount,
grpcMaxInboundMessageSize, ...): cluster/config/client_limits.py.
Every other key is a StoreConfig key; unknown keys are logged and ignored, as RocketMQ does.
One has another default on a node: messageIndexProcessEnable is true (the index is built by
a child process, store/index/index_process.py; false builds it in the node's own process).
"""
from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass, field

from .client_limits import CLIENT_LIMIT_KEYS, ClientLimits, client_limits_from_properties
from store.config import StoreConfig, parse_properties
from common.config_values import ConfigError, prop_bool, prop_int
from store.layout import StoreLayout

from .shipping_config import KEYS as SHIPPING_KEYS, ShippingConfig, shipping_config_from_properties
from cluster.security.access import ACL_KEYS, AclConfig, acl_config_from_properties
from cluster.security.tls import KEYS as TLS_KEYS, TlsSettings, tls_settings_from_properties

log = logging.getLogger(__name__)

NODE_KEYS = frozenset({"brokerClusterName", "brokerName", "brokerId", "adminToken",
                       "adminTokenFile", "advertisedAddress", "groupAddresses",
                       "autoCreateTopicEnable", "defaultTopicQueueNums", "accessKey", "secretKey",
                       "minInvisibleTimeMillsForRecv", "transactionTimeOut",
                       "transactionCheckMax", "transactionCheckInterval", "controllerAddr",
                       "controllerHeartbeatInterval", "brokerElectionPriority", "clusterSecret",
                       "clusterSecretFile", "metricsListenAddress", "serverEventLoop",
                       "receiveConversionProcessEnable"}) | ACL_KEYS | TLS_KEYS | CLIENT_LIMIT_KEYS | SHIPPING_KEYS


def check_ipv4_address(key: str, value: str) -> str:
    """`value` if it is an IPv4 literal with a port (what the official clients accept in a
    route: several DNS names in one endpoint are refused, IPv6 literals break them)."""
    host, sep, port = value.rpartition(":")
    try:
        ipaddress.IPv4Address(host)
        ok = bool(sep) and port.isdigit() and 0 < int(port) < 65536
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"{key}={value!r}: want <IPv4 address>:<port>")
    return value


@dataclass(frozen=True, kw_only=True)
class NodeConfig:
    """One node's settings as read from its broker.conf (the keys of the module docstring):
    identity, admin token, membership secret, client API, controller, TLS, ACL, limits,
    shipping, metrics and the node's StoreConfig. Immutable (frozen) and checked whole at
    construction (ConfigError), so it is shared by threads freely; runtime changes go
    through LiveConfig, which swaps in a new one."""

    cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    admin_token: str = ""
    admin_token_file: str = ""
    advertised_address: str = ""  # "" -> brokerIP1 and the port the node listens on
    group_addresses: tuple[str, ...] = ()  # () -> derived (see the module doc)
    auto_create_topic_enable: bool = True
    default_topic_queue_nums: int = 4
    access_key: str = ""
    secret_key: str = ""
    min_invisible_time_ms: int = 10_000
    transaction_timeout_ms: int = 6_000
    transaction_check_max: int = 15
    transaction_check_interval_ms: int = 60_000
    controller_address: str = ""  # "" -> roles from brokerRole and SwitchRole, no controller
    controller_heartbeat_interval_ms: int = 500
    election_priority: int = 0
    cluster_secret: str = ""
    cluster_secret_file: str = ""
    acl: AclConfig = field(default_factory=AclConfig)
    tls: TlsSettings = field(default_factory=TlsSettings)
    limits: ClientLimits = field(default_factory=ClientLimits)
    shipping: ShippingConfig = field(default_factory=ShippingConfig)
    metrics_listen_address: str = ""
    server_event_loop: str = "uvloop"
    receive_conversion_process: bool = True
    store: StoreConfig = field(default_factory=StoreConfig)

    def __post_init__(self) -> None:
        for name in ("cluster_name", "broker_name"):
            value = getattr(self, name)
            if not value or any(ch.isspace() or ch == ":" for ch in value):
                raise ConfigError(f"{name}={value!r}: must be non-empty without spaces or ':'")
        if self.broker_id < 0:
            raise ConfigError(f"brokerId={self.broker_id}: must be >= 0")
        # brokerId is the node's identity, not its role: a node with id 0 may follow another
        # master after a failover without a config change.
        if self.store.is_slave and not self.store.ha_master_address and not self.controller_address:
            raise ConfigError("brokerRole=SLAVE needs haMasterAddress=<host>:<port> of the master "
                              "(or controllerAddr, to take the role from a controller)")
        for address in self.controller_addresses:
            host, sep, port = address.rpartition(":")
            if not host or not sep or not port.isdigit():
                raise ConfigError(f"controllerAddr={self.controller_address!r}: want host:port "
                                  f"or host:port;host:port")
        if not 50 <= self.controller_heartbeat_interval_ms <= 60_000:
            raise ConfigError(f"controllerHeartbeatInterval={self.controller_heartbeat_interval_ms}:"
                              f" must be 50..60000 ms")
        if self.cluster_secret and self.cluster_secret_file:
            raise ConfigError("set clusterSecret or clusterSecretFile, not both")
        if not (self.cluster_secret or self.cluster_secret_file) and (
                self.store.is_slave or self.controller_address):
            needs = "controllerAddr" if self.controller_address else "brokerRole=SLAVE"
            raise ConfigError(f"{needs} needs clusterSecret or clusterSecretFile: masters and "
                              f"controllers admit only nodes that prove membership with the "
                              f"cluster's shared secret")
        if self.admin_token and self.admin_token_file:
            raise ConfigError("set adminToken or adminTokenFile, not both")
        if self.advertised_address:
            check_ipv4_address("advertisedAddress", self.advertised_address)
        for address in self.group_addresses:
            check_ipv4_address("groupAddresses", address)
        if not 1 <= self.default_topic_queue_nums <= 1024:
            raise ConfigError(f"defaultTopicQueueNums={self.default_topic_queue_nums}: must be 1..1024")
        if not 1 <= self.min_invisible_time_ms <= 12 * 3600_000:
            raise ConfigError(f"minInvisibleTimeMillsForRecv={self.min_invisible_time_ms}: must be "
                              f"1..43200000")
        if self.min_invisible_time_ms > self.limits.max_invisible_time_ms:
            raise ConfigError(f"minInvisibleTimeMillsForRecv={self.min_invisible_time_ms} is above "
                              f"maxInvisibleTimeMills={self.limits.max_invisible_time_ms}")
        if not 0 <= self.transaction_timeout_ms <= 24 * 3600_000:
            raise ConfigError(f"transactionTimeOut={self.transaction_timeout_ms}: must be "
                              f"0..86400000 ms")
        if not 1 <= self.transaction_check_max <= 1000:
            raise ConfigError(f"transactionCheckMax={self.transaction_check_max}: must be 1..1000")
        if not 10 <= self.transaction_check_interval_ms <= 24 * 3600_000:
            raise ConfigError(f"transactionCheckInterval={self.transaction_check_interval_ms}: "
                              f"must be 10..86400000 ms")
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("set both accessKey and secretKey, or neither")
        if self.metrics_listen_address:
            host, sep, port = self.metrics_listen_address.rpartition(":")
            if not host or not sep or not port.isdigit() or int(port) > 65535:
                raise ConfigError(f"metricsListenAddress={self.metrics_listen_address!r}: want "
                                  f"host:port")
        if self.server_event_loop not in EVENT_LOOPS:
            raise ConfigError(f"serverEventLoop={self.server_event_loop!r}: want "
                              f"{' or '.join(EVENT_LOOPS)}")
        if self.shipping.enabled and not (self.cluster_secret or self.cluster_secret_file):
            raise ConfigError("archiveAddress needs clusterSecret or clusterSecretFile: the "
                              "archive admits only nodes that prove membership")

    @property
    def controller_addresses(self) -> list[str]:
        return [a.strip() for a in self.controller_address.split(";") if a.strip()]

    @property
    def node_id(self) -> str:
        return f"{self.broker_name}:{self.broker_id}"

    @property
    def listen_address(self) -> str:
        return f"{self.store.broker_ip1}:{self.store.listen_port}"

    @property
    def default_token_path(self) -> str:
        return StoreLayout(self.store.store_path_root_dir).admin_token


# StoreConfig keys whose default differs on a node: a node builds its index in a child
# process (store/index/index_process.py), off the GIL of the process that serves the clients.
# serverEventLoop: the gRPC server's event loop (cluster/serving/grpc_server.new_event_loop)
EVENT_LOOPS = ("uvloop", "asyncio")

NODE_STORE_DEFAULTS = {"messageIndexProcessEnable": "true"}


def node_config_from_properties(props: dict[str, str]) -> NodeConfig:
    store, unknown = StoreConfig.from_properties({**NODE_STORE_DEFAULTS, **props}, NODE_KEYS)
    if unknown:
        log.warning("ignoring unknown config keys: %s", ", ".join(unknown))
    broker_id = prop_int(props, "brokerId", 0)
    groups = tuple(a.strip() for a in props.get("groupAddresses", "").split(",") if a.strip())
    return NodeConfig(cluster_name=props.get("brokerClusterName", "DefaultCluster").strip(),
                      broker_name=props.get("brokerName", "broker-a").strip(),
                      broker_id=broker_id, admin_token=props.get("adminToken", "").strip(),
                      admin_token_file=props.get("adminTokenFile", "").strip(),
                      advertised_address=props.get("advertisedAddress", "").strip(),
                      group_addresses=groups,
                      auto_create_topic_enable=prop_bool(props, "autoCreateTopicEnable", True),
                      default_topic_queue_nums=prop_int(props, "defaultTopicQueueNums", 4),
                      access_key=props.get("accessKey", "").strip(),
                      secret_key=props.get("secretKey", "").strip(),
                      min_invisible_time_ms=prop_int(props, "minInvisibleTimeMillsForRecv",
                                                     10_000),
                      transaction_timeout_ms=prop_int(props, "transactionTimeOut", 6_000),
                      transaction_check_max=prop_int(props, "transactionCheckMax", 15),
                      transaction_check_interval_ms=prop_int(props, "transactionCheckInterval",
                                                             60_000),
                      controller_address=props.get("controllerAddr", "").strip(),
                      controller_heartbeat_interval_ms=prop_int(props,
                                                                "controllerHeartbeatInterval", 500),
                      election_priority=prop_int(props, "brokerElectionPriority", 0),
                      cluster_secret=props.get("clusterSecret", "").strip(),
                      cluster_secret_file=props.get("clusterSecretFile", "").strip(),
                      acl=acl_config_from_properties(props),
                      tls=tls_settings_from_properties(props),
                      limits=client_limits_from_properties(props),
                      shipping=shipping_config_from_properties(props),
                      metrics_listen_address=props.get("metricsListenAddress", "").strip(),
                      server_event_loop=props.get("serverEventLoop", "uvloop").strip(),
                      receive_conversion_process=prop_bool(props,
                                                           "receiveConversionProcessEnable", True),
                      store=store)


def load_node_config(path: str) -> NodeConfig:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from e
    return node_config_from_properties(parse_properties(text))

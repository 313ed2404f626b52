"""Settings of one node: its identity in the cluster, the admin token, and its StoreConfig.

Read from a broker.conf-style file (RocketMQ's key names where RocketMQ has them). The node's
own keys and what each means are NODE_KEY_DOCS below; the others come from the modules that
parse them: ACL (cluster/security/access.py), TLS (cluster/security/tls.py), client limits
(cluster/config/client_limits.py), the commitlog archive (cluster/config/shipping_config.py),
and every other key is a StoreConfig key (store/config.py). Unknown keys are logged and
ignored, as RocketMQ does. One StoreConfig key has another default on a node:
messageIndexProcessEnable is true (the index is built by a child process,
store/index/index_process.py; false builds it in the node's own process).

Membership (cluster/security/member_proof.py): replication and controller calls are admitted
only after a challenge-response over the cluster's shared secret (clusterSecret, which never
crosses the wire). Controller mode (cluster/controller/): with controllerAddr set the node
takes its role from the controller, whatever brokerRole and brokerId say (brokerRole is only
the hint a new group starts from, and haMasterAddress is not needed).
"""
from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass, field

from .client_limits import CLIENT_LIMIT_KEYS, ClientLimits, client_limits_from_properties
from store.config import StoreConfig, parse_properties
from common.config_values import ConfigError, KeyDoc, prop_bool, prop_int
from store.layout import StoreLayout

from .shipping_config import KEYS as SHIPPING_KEYS, ShippingConfig, shipping_config_from_properties
from cluster.security.access import ACL_KEYS, AclConfig, acl_config_from_properties
from cluster.security.tls import KEYS as TLS_KEYS, TlsSettings, tls_settings_from_properties

log = logging.getLogger(__name__)

# The node's own keys: what each means (rendered into the docs' configuration reference with
# the type and default of the field it fills; tests/docs/test_config_reference.py checks that
# every key the node reads has an entry). node_config_from_properties reads them.
NODE_KEY_DOCS: dict[str, KeyDoc] = {
    "brokerClusterName": KeyDoc("The cluster's name.", field="cluster_name"),
    "brokerName": KeyDoc("The broker group's name: the master and its slaves share it.",
                         field="broker_name"),
    "brokerId": KeyDoc("The node's number in its group: its identity (brokerName:brokerId), "
                       "not its role.", field="broker_id"),
    "adminToken": KeyDoc("The bearer token of the Admin API, inline.", field="admin_token"),
    "adminTokenFile": KeyDoc("Or a file holding it; with neither, the node generates one into "
                             "<storePathRootDir>/config/admin.token (mode 0600) and logs the "
                             "path.", field="admin_token_file"),
    "clusterSecret": KeyDoc("The cluster's shared secret, inline (at least 16 characters, the "
                            "same on every node and controller). Without it (or the file) the "
                            "node admits no slave and cannot follow a master or a controller.",
                            field="cluster_secret"),
    "clusterSecretFile": KeyDoc("Or a file holding it.", field="cluster_secret_file"),
    "advertisedAddress": KeyDoc("IPv4 host:port clients and peers use to reach this node "
                                "(empty: brokerIP1 and the port it listens on).",
                                field="advertised_address"),
    "groupAddresses": KeyDoc("Comma-separated IPv4 host:port of every node of the group, "
                             "listed in QueryRoute (empty: the nodes the controller has heard "
                             "of, or this node and its master); needed without a controller or "
                             "behind NAT.", field="group_addresses"),
    "autoCreateTopicEnable": KeyDoc("QueryRoute and SendMessage create an unknown topic (on "
                                    "the master, in the replicated topic table).",
                                    field="auto_create_topic_enable"),
    "defaultTopicQueueNums": KeyDoc("Queues of a topic created without queue counts (1..1024).",
                                    field="default_topic_queue_nums"),
    "accessKey": KeyDoc("With secretKey: every MessagingService call must carry a valid "
                        "MQv2-HMAC-SHA1 signature (else UNAUTHORIZED); with ACL on, the pair "
                        "a slave signs its relay of transaction check-backs with.",
                        field="access_key"),
    "secretKey": KeyDoc("The secret of accessKey; set both or neither.", field="secret_key"),
    "minInvisibleTimeMillsForRecv": KeyDoc("The shortest invisible duration ReceiveMessage and "
                                           "ChangeInvisibleDuration accept (the RocketMQ 5 "
                                           "proxy's default).", "ms",
                                           field="min_invisible_time_ms"),
    "transactionTimeOut": KeyDoc("A half message stays unchecked this long after it was "
                                 "stored.", "ms", field="transaction_timeout_ms"),
    "transactionCheckMax": KeyDoc("Check-backs sent before an unanswered transaction is "
                                  "rolled back.", field="transaction_check_max"),
    "transactionCheckInterval": KeyDoc("Time between two check-back rounds of the master.",
                                       "ms", field="transaction_check_interval_ms"),
    "controllerAddr": KeyDoc("host:port of the controller, or host:port;host:port of "
                             "several sharing their state in etcd (heartbeats go to the active "
                             "one). Set: the node takes its role from the controller.",
                             field="controller_address"),
    "controllerHeartbeatInterval": KeyDoc("Time between two heartbeats to the controller "
                                          "(50..60000).", "ms",
                                          field="controller_heartbeat_interval_ms"),
    "brokerElectionPriority": KeyDoc("The lower wins an election between equally complete "
                                     "nodes.", field="election_priority"),
    "metricsListenAddress": KeyDoc("host:port of the Prometheus endpoint (GET /metrics) and "
                                   "the node's console; HTTPS with the node's certificate "
                                   "when tlsEnable; empty: none.",
                                   field="metrics_listen_address"),
    "serverEventLoop": KeyDoc("uvloop or asyncio: the event loop of the node's gRPC server "
                              "(cluster/serving/grpc_server.py); asyncio is the one to try "
                              "first if a problem looks like the loop's.",
                              field="server_event_loop"),
    "receiveConversionProcessEnable": KeyDoc("A master builds the messages of its receives' "
                                             "answers in a child process that reads the "
                                             "commitlog files itself "
                                             "(cluster/consume/conversion_process.py); false: "
                                             "in the serving process.",
                                             field="receive_conversion_process"),
}
NODE_KEYS = frozenset(NODE_KEY_DOCS) | ACL_KEYS | TLS_KEYS | CLIENT_LIMIT_KEYS | SHIPPING_KEYS


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

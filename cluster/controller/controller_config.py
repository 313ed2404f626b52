"""Settings of a controller process, read from a properties file like broker.conf: KEY_DOCS
below (and TLS with a node's keys, cluster/security/tls.py). Several controllers share their
state in etcd when controllerEtcdEndpoints is set; left empty, one controller keeps its state
in a file (the default). Unknown keys are refused.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from store.broker_role import BrokerRole
from common.config_values import ConfigError, KeyDoc, prop_bool, prop_int
from store.layout import ADMIN_TOKEN_FILE

from cluster.controller.election import ElectionConfig
from cluster.security.tls import KEYS as TLS_KEYS, TlsSettings, tls_settings_from_properties

# The keys, the ControllerConfig field each fills and what it means (the docs'
# configuration reference).
KEY_DOCS = {
    "listenAddress": KeyDoc("host:port the controller serves on.", field="listen_address"),
    "controllerStorePath": KeyDoc("Folder of its state file (controller.json).",
                                  field="store_path"),
    "adminTokenFile": KeyDoc("The bearer token operators' calls need (GetGroups, "
                             "SwitchMaster); empty: generated into <store>/admin.token.",
                             field="admin_token_file"),
    "clusterSecret": KeyDoc("The cluster's shared secret (required, this or the file): only "
                            "nodes that prove they know it may heartbeat "
                            "(cluster/security/member_proof.py).", field="cluster_secret"),
    "clusterSecretFile": KeyDoc("Or a file holding it.", field="cluster_secret_file"),
    "controllerFailoverTimeoutMillis": KeyDoc("A master silent or unhealthy this long is "
                                              "replaced.", "ms",
                                              field="election.failover_timeout_ms"),
    "controllerLeaseMillis": KeyDoc("A master that heard nothing from the controller this long "
                                    "stops acknowledging writes unless its in-sync slaves ack "
                                    "them; must be below the failover timeout.", "ms",
                                    field="election.lease_ms"),
    "controllerSettleMillis": KeyDoc("After a start (or taking over as the active one), how "
                                     "long to wait for a group's in-sync nodes to report "
                                     "before electing.", "ms", field="election.settle_ms"),
    "enableElectUncleanMaster": KeyDoc("Elect outside the sync state set: false never loses an "
                                       "acknowledged write; true prefers availability and may "
                                       "lose acknowledged writes.", field="election.unclean"),
    "controllerDefaultMasterRole": KeyDoc("What a new group's master is when no node says.",
                                          field="election.default_master_role"),
    "controllerEtcdEndpoints": KeyDoc("etcd client URLs (http://), comma- or "
                                      "semicolon-separated, tried in turn; empty: one "
                                      "controller with its state in a file.",
                                      field="etcd.endpoints"),
    "controllerEtcdPrefix": KeyDoc("The key prefix of this cluster's controllers: "
                                   "<prefix>/leader, <prefix>/groups/<brokerName>.",
                                   field="etcd.prefix"),
    "controllerEtcdLeaseSeconds": KeyDoc("The active controller's etcd lease (2..60): a standby "
                                         "takes over within about this long after the active "
                                         "one dies.", "s", field="etcd.lease_seconds"),
    "controllerAdvertisedAddress": KeyDoc("host:port nodes reach this controller on, written "
                                          "into the leader key so standbys can name it "
                                          "(empty: listenAddress).",
                                          field="advertised_address"),
    "metricsListenAddress": KeyDoc("host:port of its Prometheus /metrics and the cluster's "
                                   "console; HTTPS with its certificate when tlsEnable; empty: "
                                   "none.", field="metrics_listen_address"),
}
KEYS = frozenset(KEY_DOCS) | TLS_KEYS
STATE_FILE = "controller.json"


@dataclass(frozen=True)
class EtcdSettings:
    """Where the controllers keep their shared state; no endpoints: a file of our own."""
    endpoints: tuple[str, ...] = ()
    prefix: str = "/rmqstore"
    lease_seconds: int = 3

    def __post_init__(self) -> None:
        for url in self.endpoints:
            scheme, sep, rest = url.partition("://")
            if scheme != "http" or not sep or not rest.strip("/"):
                raise ConfigError(f"controllerEtcdEndpoints: {url!r} is not an http:// URL "
                                  f"(etcd's JSON gateway, plain HTTP)")
        if not self.prefix.startswith("/") or self.prefix.endswith("/") or " " in self.prefix:
            raise ConfigError(f"controllerEtcdPrefix={self.prefix!r}: want /name, no trailing /")
        if not 2 <= self.lease_seconds <= 60:
            raise ConfigError(f"controllerEtcdLeaseSeconds={self.lease_seconds}: must be 2..60 "
                              f"(etcd's minimum lease is about 1.5 s)")

    @property
    def enabled(self) -> bool:
        return bool(self.endpoints)


@dataclass(frozen=True)
class ControllerConfig:
    """A controller process's settings as read from its properties file (the module
    docstring's keys): where it listens and keeps its state, its token and secret, the
    election rules, etcd, TLS and metrics. Immutable."""

    listen_address: str = "127.0.0.1:9878"
    store_path: str = "data/controller"
    admin_token_file: str = ""
    election: ElectionConfig = ElectionConfig()
    etcd: EtcdSettings = EtcdSettings()
    advertised_address: str = ""  # "" -> the address it listens on
    cluster_secret: str = ""
    cluster_secret_file: str = ""
    tls: TlsSettings = TlsSettings()
    metrics_listen_address: str = ""  # Prometheus /metrics; "" -> none

    @property
    def state_path(self) -> str:
        return os.path.join(self.store_path, STATE_FILE)

    @property
    def token_path(self) -> str:
        return self.admin_token_file or os.path.join(self.store_path, ADMIN_TOKEN_FILE)


def controller_config_from_properties(props: dict[str, str]) -> ControllerConfig:
    unknown = sorted(set(props) - KEYS)
    if unknown:
        raise ConfigError(f"unknown controller keys: {', '.join(unknown)}")

    def number(key: str, default: int) -> int:
        return prop_int(props, key, default, minimum=0)
    unclean = prop_bool(props, "enableElectUncleanMaster", False)
    try:
        role = BrokerRole.parse(props.get("controllerDefaultMasterRole", "SYNC_MASTER").strip())
        election = ElectionConfig(
            failover_timeout_ms=number("controllerFailoverTimeoutMillis", 3000),
            lease_ms=number("controllerLeaseMillis", 2000),
            settle_ms=number("controllerSettleMillis", 3000), unclean=unclean,
            default_master_role=role)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    address = _host_port("listenAddress", props.get("listenAddress", "127.0.0.1:9878"))
    advertised = props.get("controllerAdvertisedAddress", "").strip()
    if advertised:
        _host_port("controllerAdvertisedAddress", advertised)
    endpoints = props.get("controllerEtcdEndpoints", "").replace(";", ",").split(",")
    etcd = EtcdSettings(endpoints=tuple(e.strip() for e in endpoints if e.strip()),
                        prefix=props.get("controllerEtcdPrefix", "/rmqstore").strip(),
                        lease_seconds=number("controllerEtcdLeaseSeconds", 3))
    return ControllerConfig(listen_address=address,
                            store_path=props.get("controllerStorePath", "data/controller").strip(),
                            admin_token_file=props.get("adminTokenFile", "").strip(),
                            election=election, etcd=etcd, advertised_address=advertised,
                            cluster_secret=props.get("clusterSecret", "").strip(),
                            cluster_secret_file=props.get("clusterSecretFile", "").strip(),
                            tls=tls_settings_from_properties(props),
                            metrics_listen_address=_metrics_address(props))


def _metrics_address(props: dict[str, str]) -> str:
    value = props.get("metricsListenAddress", "").strip()
    return _host_port("metricsListenAddress", value) if value else ""


def _host_port(key: str, value: str) -> str:
    value = value.strip()
    host, sep, port = value.rpartition(":")
    if not host or not sep or not port.isdigit():
        raise ConfigError(f"{key}={value!r}: want host:port")
    return value

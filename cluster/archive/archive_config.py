"""Settings of an archive server (`python -m cluster archive`), a properties file like
broker.conf: KEY_DOCS below, and TLS with a node's keys (cluster/security/tls.py) for its port
and its calls out. Unknown keys are refused.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from store.config import parse_delete_when
from common.config_values import ConfigError, KeyDoc, prop_int

from cluster.security.tls import KEYS as TLS_KEYS, TlsSettings, tls_settings_from_properties

# The keys, the ArchiveConfig field each fills and what it means (the docs' configuration
# reference).
KEY_DOCS = {
    "listenAddress": KeyDoc("host:port of its gRPC server.", field="listen_address"),
    "advertisedAddress": KeyDoc("host:port others reach it on, written to the registry "
                                "(empty: listenAddress, with the port it got).",
                                field="advertised_address"),
    "httpListenAddress": KeyDoc("host:port of the HTTP JSON endpoint (port 0: a free port; "
                                "empty: none); HTTPS with its certificate when tlsEnable.",
                                field="http_listen_address"),
    "archiveStorePath": KeyDoc("Where the groups' files live.", field="store_path"),
    "adminTokenFile": KeyDoc("The bearer token of the reads and Reconsume; empty: generated "
                             "into <archiveStorePath>/admin.token.", field="admin_token_file"),
    "clusterSecret": KeyDoc("The cluster's shared secret (required, this or the file): only "
                            "nodes that prove it may ship files.", field="cluster_secret"),
    "clusterSecretFile": KeyDoc("Or a file holding it.", field="cluster_secret_file"),
    "fileReservedTime": KeyDoc("A file is kept this long after its last message.", "hours",
                               field="file_reserved_time"),
    "deleteWhen": KeyDoc("Hours of the day expired files are deleted (several: \"03;04\").",
                         field="delete_when"),
    "diskMaxUsedSpaceRatio": KeyDoc("Above this used share of the disk the oldest files go, "
                                    "expired or not, after mixed mode forwarded them if it can "
                                    "(10..95).", "%", field="disk_max_used_space_ratio"),
    "cleanResourceInterval": KeyDoc("Time between two retention rounds.", "ms",
                                    field="clean_resource_interval"),
    "forwardAddress": KeyDoc("Mixed mode: host:port of the next archive; a file is forwarded "
                             "there before this archive's retention deletes it (chained "
                             "archives). Empty: none.", field="forward_address"),
    "forwardAheadHours": KeyDoc("Forward this long before expiry.", "hours",
                                field="forward_ahead_hours"),
    "registryFile": KeyDoc("The registry of archives (JSON) this archive announces itself and "
                           "its time ranges in; empty: none.", field="registry_file"),
    "controllerAddr": KeyDoc("The controllers (host:port;host:port) it announces the same to "
                             "every retention round (member-only: it proves the cluster "
                             "secret); `history --controller` asks them. Empty: none.",
                             field="controller_address"),
    "reconsumeAccessKey": KeyDoc("The ACL user Reconsume signs its sends to the cluster as (a "
                                 "cluster with aclEnable); with TLS on, Reconsume trusts "
                                 "tlsServerTrustCertPath.", field="reconsume_access_key"),
    "reconsumeSecretKey": KeyDoc("That user's secret key; set both or neither.",
                                 field="reconsume_secret_key"),
    "metricsListenAddress": KeyDoc("host:port of its Prometheus /metrics; HTTPS when "
                                   "tlsEnable; empty: none.",
                                   field="metrics_listen_address"),
}
KEYS = frozenset(KEY_DOCS) | TLS_KEYS


def _host_port(key: str, value: str, port_zero: bool = True) -> str:
    host, sep, port = value.rpartition(":")
    if not host or not sep or not port.isdigit() or int(port) > 65535 or (
            not port_zero and int(port) == 0):
        raise ConfigError(f"{key}={value!r}: want host:port")
    return value


@dataclass(frozen=True)
class ArchiveConfig:
    """An archive server's settings as read from its properties file (the keys of the module
    docstring), checked whole at construction (ConfigError). Immutable, so shared freely."""

    listen_address: str = "127.0.0.1:9880"
    advertised_address: str = ""
    http_listen_address: str = "127.0.0.1:0"
    store_path: str = "data/archive"
    admin_token_file: str = ""
    cluster_secret: str = ""
    cluster_secret_file: str = ""
    file_reserved_time: int = 720
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    clean_resource_interval: int = 10_000
    forward_address: str = ""
    forward_ahead_hours: int = 1
    registry_file: str = ""
    controller_address: str = ""
    reconsume_access_key: str = ""
    reconsume_secret_key: str = ""
    metrics_listen_address: str = ""
    tls: TlsSettings = field(default_factory=TlsSettings)

    def __post_init__(self) -> None:
        _host_port("listenAddress", self.listen_address)
        if self.advertised_address:
            _host_port("advertisedAddress", self.advertised_address, port_zero=False)
        if self.http_listen_address:
            _host_port("httpListenAddress", self.http_listen_address)
        if self.forward_address:
            _host_port("forwardAddress", self.forward_address, port_zero=False)
        if not (self.cluster_secret or self.cluster_secret_file):
            raise ConfigError("the archive needs clusterSecret or clusterSecretFile: it takes "
                              "files only from nodes that prove membership")
        if self.cluster_secret and self.cluster_secret_file:
            raise ConfigError("set clusterSecret or clusterSecretFile, not both")
        if self.file_reserved_time < 0:
            raise ConfigError(f"fileReservedTime={self.file_reserved_time}: must be >= 0 hours")
        parse_delete_when(self.delete_when)
        if not 10 <= self.disk_max_used_space_ratio <= 95:
            raise ConfigError(f"diskMaxUsedSpaceRatio={self.disk_max_used_space_ratio}: must "
                              f"be 10..95")
        if not 100 <= self.clean_resource_interval <= 3600_000:
            raise ConfigError(f"cleanResourceInterval={self.clean_resource_interval}: must be "
                              f"100..3600000 ms")
        if self.metrics_listen_address:
            _host_port("metricsListenAddress", self.metrics_listen_address)
        if bool(self.reconsume_access_key) != bool(self.reconsume_secret_key):
            raise ConfigError("set both reconsumeAccessKey and reconsumeSecretKey, or neither")
        for address in self.controller_addresses:
            _host_port("controllerAddr", address, port_zero=False)
        if not 0 <= self.forward_ahead_hours <= 24 * 365:
            raise ConfigError(f"forwardAheadHours={self.forward_ahead_hours}: must be 0..8760")

    @property
    def controller_addresses(self) -> list[str]:
        return [a.strip() for a in self.controller_address.split(";") if a.strip()]

    @property
    def token_path(self) -> str:
        return self.admin_token_file or os.path.join(self.store_path, "admin.token")

    def delete_hours(self) -> frozenset[int]:
        return parse_delete_when(self.delete_when)


def archive_config_from_properties(props: Mapping[str, str]) -> ArchiveConfig:
    unknown = sorted(set(props) - KEYS)
    if unknown:
        raise ConfigError(f"unknown archive config keys: {', '.join(unknown)}")

    def integer(key: str, default: int) -> int:
        return prop_int(props, key, default)

    text = {k: v.strip() for k, v in props.items()}
    defaults = ArchiveConfig.__dataclass_fields__
    return ArchiveConfig(
        listen_address=text.get("listenAddress", defaults["listen_address"].default),
        advertised_address=text.get("advertisedAddress", ""),
        http_listen_address=text.get("httpListenAddress",
                                     defaults["http_listen_address"].default),
        store_path=text.get("archiveStorePath", defaults["store_path"].default),
        admin_token_file=text.get("adminTokenFile", ""),
        cluster_secret=text.get("clusterSecret", ""),
        cluster_secret_file=text.get("clusterSecretFile", ""),
        file_reserved_time=integer("fileReservedTime", 720),
        delete_when=text.get("deleteWhen", "04"),
        disk_max_used_space_ratio=integer("diskMaxUsedSpaceRatio", 75),
        clean_resource_interval=integer("cleanResourceInterval", 10_000),
        forward_address=text.get("forwardAddress", ""),
        forward_ahead_hours=integer("forwardAheadHours", 1),
        registry_file=text.get("registryFile", ""),
        controller_address=text.get("controllerAddr", ""),
        reconsume_access_key=text.get("reconsumeAccessKey", ""),
        reconsume_secret_key=text.get("reconsumeSecretKey", ""),
        metrics_listen_address=text.get("metricsListenAddress", ""),
        tls=tls_settings_from_properties(props))
